"""What several commands share: how they read an instant and a counter store's URL."""

from __future__ import annotations

import argparse
import datetime
from typing import Optional, Union

from .._core import MemoryStore, RedisStore


def instant(text: str) -> str:
    """An ISO 8601 instant from `2026-11-30`, `2026-11-30T10:00`, or a full instant (an
    `argparse` type: a wrong one is an `ArgumentTypeError` that shows an example)."""
    try:
        parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a date or an ISO 8601 instant (e.g. 2026-11-30 or "
            "2026-11-30T10:00:00Z)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=datetime.timezone.utc)
    return parsed.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def store_from_url(url: str, prefix: str) -> Optional[Union[MemoryStore, RedisStore]]:
    """The counter store `--store` names: `memory`, or a `redis://` / `rediss://` URL; None
    for anything else (the command says what is accepted)."""
    if url == "memory":
        return MemoryStore()
    if url.startswith(("redis://", "rediss://")):
        return RedisStore(url, prefix)
    return None
