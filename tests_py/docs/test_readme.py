"""The README's promises, checked against the real thing: the example's install line and the
cost column of `usage-guard usage`. (Its `usage-guard check` samples, with every other snippet,
run in test_docs_snippets.py.)"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug

ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        [sys.executable, "-m", "usage_guard.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )


def with_bin_on_path() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}


@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("pip", "maturin")) or not shutil.which("cargo"),
    reason="reads the checkout's metadata: needs pip, maturin and cargo (not in the wheel test)",
)
def test_the_example_installs_from_the_checkout() -> None:
    """The example's install line names the checkout itself: `pip install . openai` from the
    root resolves to this project (metadata only; nothing is built or installed)."""
    text = (ROOT / "examples" / "openai_engine.py").read_text()
    [line] = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("pip install")]
    args = line.split("#")[0].split()[2:]
    assert args == [".", "openai"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--report",
            "-",
            "--quiet",
            ".",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        # Without build isolation the maturin backend shells out to `maturin` by name: the
        # environment's own bin directory must be on PATH even when the venv is not activated.
        env=with_bin_on_path(),
    )
    assert done.returncode == 0, done.stderr
    assert '"name": "usage-guard"' in done.stdout or '"name": "usage_guard"' in done.stdout


def test_usage_cost_column_has_one_precision(tmp_path: Path, clock: ug.ManualClock) -> None:
    policy: dict[str, Any] = {
        "models": {"gpt-5": {"prices": {"input": 1.25, "output": 10.0}}},
        "settings": {"anonymous": "unlimited"},
    }
    db = str(tmp_path / "ledger.db")
    guard = ug.Guard(ug.Policy.from_dict(policy), clock=clock, ledger=ug.SqliteLedger(db))
    for user, prompt, output in (("alice", 1_000, 200), ("bob", 200_000, 0), ("carol", 0, 0)):
        guard.admit(user, "gpt-5", prompt_tokens=prompt, max_tokens=output).bill(
            input_tokens=prompt, output_tokens=output
        )
    guard.close()
    done = run(["usage", "--ledger", db, "--group-by", "user"], tmp_path)
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    column = header.split().index("cost")
    costs = {row.split()[0]: row.split()[column] for row in rows}
    # $0.003250 (not $0.00325), $0.250000 (not $0.25), $0.000000 (not $0): one precision.
    assert costs == {"alice": "$0.003250", "bob": "$0.250000", "carol": "$0.000000"}
