"""examples/openai_engine.py runs against the fake provider with the official SDK."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fake_provider import WORD, FakeProvider

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_engine.py"


def test_example_engine_answers_and_bills():
    with FakeProvider() as fake:
        env = {**os.environ, "OPENAI_BASE_URL": f"{fake.url}/v1", "OPENAI_API_KEY": "sk-test"}
        out = subprocess.run(
            [sys.executable, str(EXAMPLE), "alice", "hi"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=True,
        ).stdout
        body = fake.bodies("/v1/chat/completions")[0]
    assert WORD * 12 in out
    assert "user" not in body and body["model"] == "gpt-5"
    # the usage view printed after the call counts it: the platform's 600 requests an hour
    assert "'restricted_by': 'platform'" in out and "'current_value': 1," in out
