"""docs/security.md's table of limits is what the code does: each setting it names is a
`[gateway]` key the policy accepts, its default is the one a policy without it reports, and
every bound the code reports is in the table."""

from __future__ import annotations

import re
import resource
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug
from serve_support import serve

DOC = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()
MARK = "<!-- limits table:"


def rows() -> dict[str, list[str]]:
    """setting → its cells after the name (default, range, what it bounds), from the table
    after the mark."""
    lines = DOC[DOC.index(MARK) :].split("\n\n")[1].splitlines()
    assert lines[0].startswith("| setting | default | range |"), lines[0]
    out = {}
    for row in lines[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        name = re.fullmatch(r"`([\w.]+)`", cells[0])
        assert name, row
        out[name.group(1)] = cells[1:]
    return out


def table() -> dict[str, str]:
    """setting → its default cell."""
    return {name: cells[0] for name, cells in rows().items()}


def default_of(cell: str) -> int | None:
    """`8388608 (8 MiB)` → 8388608; `derived: ...`, `one per core` → None."""
    m = re.match(r"(\d+)\b", cell)
    return int(m.group(1)) if m else None


def test_every_limit_is_in_the_table_with_its_default():
    documented = table()
    reported = ug.Policy.from_dict({}).gateway_limits
    assert set(documented) == set(reported)
    for name, cell in documented.items():
        assert default_of(cell) == reported[name], (name, cell)


def gateway(name: str, value: int) -> dict[str, Any]:
    """The policy whose `[gateway]` sets `name` to `value`: `otel.max_queue` is `max_queue`
    of `[gateway.otel]` (with the endpoint that table requires)."""
    table, _, key = name.rpartition(".")
    if table == "otel":
        return {"gateway": {"otel": {"endpoint": "http://127.0.0.1:4318", key: value}}}
    return {"gateway": {name: value}}


def bound(text: str) -> int:
    """`3600` → 3600, `2^53` → 2**53."""
    base, _, power = text.partition("^")
    return int(base) ** int(power) if power else int(base)


def test_each_documented_range_is_the_one_the_policy_accepts():
    """Both ends of each range are accepted, one past either end is refused with an error
    naming the key and that range."""
    for name, cells in rows().items():
        m = re.fullmatch(r"(\S+)–(\S+)", cells[1])
        assert m, (name, cells[1])
        low, high = bound(m.group(1)), bound(m.group(2))
        for value in (low, high):
            assert ug.Policy.from_dict(gateway(name, value)).gateway_limits[name] == value
        for value in [high + 1] + ([low - 1] if low > 0 else []):
            with pytest.raises(ug.PolicyError) as refused:
                ug.Policy.from_dict(gateway(name, value))
            said = f"gateway.{name}: must be a whole number from {low} to {high}"
            assert said in str(refused.value), (name, value)


def test_each_documented_setting_is_read_from_the_policy():
    """Each setting set to 2048 (8 where its range ends below) is reported back as set."""
    for name in table():
        value = 8 if name in ("threads", "otel.export_timeout_seconds") else 2048
        policy = ug.Policy.from_dict(gateway(name, value))
        assert policy.gateway_limits[name] == value, name


def test_the_derived_cap_is_what_the_gateway_takes(tmp_path):
    """The formula in the table's cell, applied to the descriptor limit `usage-guard serve`
    raises itself to (the hard one), is the cap it says it listens with."""
    cell = table()["max_connections"]
    m = re.search(r"\(the descriptor limit − (\d+)\) / 2, at most (\d+)", cell)
    assert m, cell
    reserve, most = int(m.group(1)), int(m.group(2))
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    with serve({"models": {"m": {"provider": "openai"}}}, tmp_path) as (proc, _):
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None
        said = re.search(r"at most (\d+) connections", proc.stderr.read())
    assert said
    if hard != resource.RLIM_INFINITY:
        assert int(said.group(1)) == max(1, min(most, (hard - reserve) // 2))
