"""No input ends the process: values nested without bound, or containing themselves, are
refused with a ValueError naming the argument, also on a thread with a small (256 KiB)
stack, and the guard goes on working."""

from __future__ import annotations

import re
import threading
from typing import Any, Callable

import pytest
import usage_guard as ug

POLICY = {"models": {"m": {"display_name": "M", "max_output_tokens": 100}}}


def nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def looped() -> dict[str, Any]:
    value: dict[str, Any] = {"role": "user"}
    value["content"] = value
    return value


def _guard() -> ug.Guard:
    return ug.Guard(ug.Policy.from_dict(POLICY))


CASES: dict[str, tuple[str, Callable[[ug.Guard, Any], Any]]] = {
    "policy document": ("models", lambda g, v: ug.Policy.from_dict({"models": {"m": v}})),
    "request": ("request", lambda g, v: g.admit("a", "m", request={"messages": [v]})),
    "count_prompt": ("request", lambda g, v: ug.count_prompt({"messages": [v]})),
    "metadata": (
        "metadata",
        lambda g, v: g.admit("a", "m", prompt_tokens=1, max_tokens=1).bill(1, 1, metadata=v),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("make", [lambda: nested(10_000), looped], ids=["deep", "self"])
def test_hostile_input_is_a_value_error(case: str, make: Callable[[], Any]) -> None:
    argument, call = CASES[case]
    guard = _guard()
    with pytest.raises(ValueError, match=rf"^{argument}: nests deeper than 64 levels"):
        call(guard, make())
    guard.admit("a", "m", prompt_tokens=1, max_tokens=1).bill(1, 1)  # still works


def test_on_a_thread_with_a_small_stack() -> None:
    outcomes: list[str] = []

    def work() -> None:
        guard = _guard()
        for case in sorted(CASES):
            argument, call = CASES[case]
            try:
                call(guard, nested(300))
            except ValueError as refused:
                outcomes.append(str(refused).split(":")[0] == argument and "refused" or "wrong")
        # Within the bound, the same thread converts and counts without trouble.
        within = {"role": "user", "content": nested(60)}
        guard.admit("a", "m", request={"model": "m", "messages": [within]}).release()
        outcomes.append("within")

    previous = threading.stack_size(256 * 1024)
    try:
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    finally:
        threading.stack_size(previous)
    assert outcomes == ["refused"] * len(CASES) + ["within"]


def test_json_and_toml_documents_are_bounded_too() -> None:
    with pytest.raises(ug.PolicyError, match="recursion limit"):
        ug.Policy.from_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ug.PolicyError, match="recursion limit"):
        ug.Policy.from_toml("a = " + "[" * 100_000 + "]" * 100_000)


NUL_CASES: dict[str, Callable[[ug.Guard], Any]] = {
    "user": lambda g: g.admit("a\x00b", "m", prompt_tokens=1, max_tokens=1),
    "model": lambda g: g.admit("a", "m\x00", prompt_tokens=1, max_tokens=1),
    'attributes["session"]': lambda g: g.admit(
        "a", "m", prompt_tokens=1, max_tokens=1, attributes={"session": "x\x00"}
    ),
    "attributes": lambda g: g.admit(
        "a", "m", prompt_tokens=1, max_tokens=1, attributes={"s\x00": "x"}
    ),
    "request_id": lambda g: g.admit("a", "m", prompt_tokens=1, max_tokens=1).bill(
        1, 1, request_id="r\x00"
    ),
    "metadata": lambda g: g.admit("a", "m", prompt_tokens=1, max_tokens=1).bill(
        1, 1, metadata={"k": ["v\x00"]}
    ),
    "requests.id": lambda g: g.admit_batch("a", "m", [{"id": "r\x001", "prompt_tokens": 1}]),
    "state": lambda g: g.resume_batch(
        g.admit_batch("a", "m", [{"id": "r1", "prompt_tokens": 1}]).state.replace(
            '"r1"', '"r\\u00001"'
        )
    ),
}


@pytest.mark.parametrize("field", list(NUL_CASES))
def test_a_nul_character_the_ledger_cannot_store_is_refused(field: str, tmp_path: Any) -> None:
    """PostgreSQL refuses a NUL in text and JSON, and one row holding it held up every row
    behind it (and every refill of the day): a call carrying one is refused, naming the
    field, and nothing is counted."""
    guard = ug.Guard(ug.Policy.from_dict(POLICY), ledger=ug.SqliteLedger(str(tmp_path / "l.db")))
    with pytest.raises(ValueError, match=rf"^{re.escape(field)}: must not contain a NUL") as e:
        NUL_CASES[field](guard)
    if field in ("request_id", "metadata"):  # refused before the bill: it may bill again
        assert "nothing was billed: bill again without it" in str(e.value)
    guard.close()
    assert guard.ledger is not None and guard.ledger.query() == []


def test_a_nul_character_anywhere_in_a_policy_is_refused_with_its_path() -> None:
    """Table keys too (a model id, a gateway key's label), not only string values."""
    with pytest.raises(ug.PolicyError) as e:
        ug.Policy.from_dict({"models": {"m\x00x": {}, "n": {"aliases": ["n\x00"]}}})
    paths = {error["path"] for error in e.value.errors}
    assert {'models."m\\u0000x"', "models.n.aliases[0]"} <= paths, paths
