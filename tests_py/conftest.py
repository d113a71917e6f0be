"""Shared pytest fixtures: a manual clock at a known instant and a guard factory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable

import pytest
import usage_guard as ug
from redis_harness import RedisServer

START = "2026-11-30T08:00:00Z"


@pytest.fixture
def clock() -> ug.ManualClock:
    """A manual clock at Monday 2026-11-30 08:00 UTC."""
    return ug.ManualClock(START)


@pytest.fixture
def make_guard(clock: ug.ManualClock) -> Callable[..., ug.Guard]:
    """`make_guard(document, store=None)`: a guard on the fixture's clock."""

    def make(document: dict[str, Any], store: Any = None) -> ug.Guard:
        return ug.Guard(ug.Policy.from_dict(document), store=store, clock=clock)

    return make


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh redis-server for one test, stopped by pid afterwards."""
    server = RedisServer()
    try:
        yield server
    finally:
        server.stop()
