"""`usage-guard migrate`: move a Redis store's counters from the shared layout into slot groups.

usage-guard migrate --cluster redis://n1:7000 redis://n2:7001 --prefix ug

Copies what the store of the prefix holds in the shared layout (`{ug}`) — counters and open
holds — into the slot-group layout of the same prefix (`{ug:2:<owner>}`), never lowering what
is there, so running it twice, or after guards of the new layout counted use, loses and
doubles nothing. Stop the guards of the old layout first; then start them with
`slot_groups=True`. See docs/redis.md, "Slot groups". Wire it into the main parser with
`add_migrate_command(subparsers)`; the subcommand sets `func`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import UsageLimitError
from .common import add_redis_arguments, redis_store


def add_migrate_command(subparsers: Any) -> argparse.ArgumentParser:
    """Adds `migrate` to an `argparse` subparsers object and returns its parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "migrate",
        help="move a Redis store's counters from the shared layout into slot groups",
        description=(
            "Copy the counters and open holds of the prefix's shared-layout store into its "
            "slot groups (safe to run twice). Stop the old layout's guards first."
        ),
    )
    add_redis_arguments(p)
    p.set_defaults(func=migrate, slot_groups=True)
    return p


def migrate(args: argparse.Namespace) -> int:
    """Runs `migrate`; prints what was copied (exit 0) or why not (exit 1)."""
    args.slot_groups = True
    try:
        done = redis_store(args).migrate_from_shared()
    except UsageLimitError as e:
        print(f"usage-guard migrate: {e}", file=sys.stderr)
        return 1
    print(f"migrated: {done['counters']} counters, {done['holds']} holds keys")
    return 0
