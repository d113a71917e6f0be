"""Shared pytest fixtures: a manual clock at a known instant, a guard factory, a fresh
redis-server, and the fake provider (`server`, one per module; `fake`, reset per test)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Callable

import pytest
import usage_guard as ug
from fake_provider import FakeProvider
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


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    """One redis-server for a whole module (its tests count under prefixes of their own),
    stopped by pid afterwards."""
    server = RedisServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh redis-server for one test, stopped by pid afterwards."""
    server = RedisServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server() -> Iterator[FakeProvider]:
    """A fake provider (tests_py/fake_provider.py) serving one test module."""
    with FakeProvider() as f:
        yield f


@pytest.fixture
def fake(server: FakeProvider) -> FakeProvider:
    """The module's fake provider as new for each test: nothing recorded, scripted or delayed,
    and each call reporting 21 input and 12 output tokens, none cached or spent reasoning.
    (A module that wants other defaults overrides this fixture.)"""
    server.reset()
    server.output_tokens, server.input_tokens = 12, 21
    server.cached_tokens = server.reasoning_tokens = 0
    return server
