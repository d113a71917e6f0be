"""What several commands share: how they read an instant and a counter store's URL, and the
Redis store arguments of `recover` and `migrate`."""

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


def count(text: str) -> int:
    """A count of 1 or more (an `argparse` type: anything else is an `ArgumentTypeError`
    naming the value)."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 2**31:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a count: a whole number from 1 to 2147483648"
        )
    return n


def store_from_url(
    url: str, prefix: str, slot_groups: bool = False, lease_above: Optional[float] = None
) -> Optional[Union[MemoryStore, RedisStore]]:
    """The counter store `--store` names: `memory`, or a `redis://` / `rediss://` URL (with
    `--slot-groups`, `slot_groups=True`; with `--lease-above N`, `lease_above=N`); None for
    anything else (the command says what is accepted)."""
    if url == "memory":
        return MemoryStore()
    if url.startswith(("redis://", "rediss://")):
        return RedisStore(url, prefix, slot_groups=slot_groups, lease_above=lease_above)
    return None


def add_redis_arguments(p: argparse.ArgumentParser) -> None:
    """`--redis URL` or `--cluster URL...`, `--prefix` and `--slot-groups`."""
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--redis", metavar="URL", help="the Redis URL (redis://host:port/db)")
    where.add_argument("--cluster", metavar="URL", nargs="+", help="Redis Cluster node URLs")
    p.add_argument("--prefix", default="ug", help="the store's key prefix (default: ug)")
    p.add_argument(
        "--slot-groups",
        action="store_true",
        help="the store places each owner's counters in a slot group (RedisStore(..., "
        "slot_groups=True))",
    )


def redis_store(args: argparse.Namespace) -> RedisStore:
    """The store `add_redis_arguments` describes."""
    groups = bool(args.slot_groups)
    if args.cluster:
        return RedisStore.cluster(args.cluster, args.prefix, slot_groups=groups)
    return RedisStore(args.redis, args.prefix, slot_groups=groups)
