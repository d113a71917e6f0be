"""Rust log records reach Python `logging` under the `usage_guard` logger, and a counter-store
outage is logged once when it starts, not once per call."""

from __future__ import annotations

import logging
import socket

import pytest
import usage_guard as ug
from redis_harness import BUDGET_POLICY


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_store_outage_is_logged_once_under_usage_guard(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = ug.RedisStore(f"redis://127.0.0.1:{closed_port()}", prefix="logging")
    guard = ug.Guard(ug.Policy.from_dict(BUDGET_POLICY), store=store)
    calls = 5
    with caplog.at_level(logging.WARNING, logger="usage_guard"):
        for _ in range(calls):
            with pytest.raises(ug.UsageLimitsUnavailable):
                guard.admit("alice", "gpt-5", prompt_tokens=10, max_tokens=50)
    ours = [r for r in caplog.records if r.name.split(".")[0] == "usage_guard"]
    assert guard.stats()["store_errors"] >= calls
    assert len(ours) == 1, [r.getMessage() for r in ours]
    record = ours[0]
    assert record.levelno == logging.WARNING
    assert record.name.startswith("usage_guard.")  # the Rust module path, under usage_guard
    assert "counter store outage started" in record.getMessage()
    assert "admit" in record.getMessage()
