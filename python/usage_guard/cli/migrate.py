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
    """Runs `migrate`; prints what was read and copied (exit 0) or why not (exit 1; 2 for
    bad usage)."""
    args.slot_groups = True
    try:
        store = redis_store(args)
    except ValueError as e:
        print(f"usage-guard migrate: {e}", file=sys.stderr)
        return 2
    try:
        done = store.migrate_from_shared()
    except UsageLimitError as e:
        print(f"usage-guard migrate: {e}", file=sys.stderr)
        return 1
    print(
        f"migrated: {done['counters']} counters, {done['holds']} holds keys copied "
        f"({done['read']} keys read)"
    )
    if done["read"] == 0:
        print(
            f"usage-guard migrate: nothing found under {{{args.prefix}}} (the shared layout's "
            "keys of that prefix): check --prefix",
            file=sys.stderr,
        )
    if done["filled"]:
        print(
            f"usage-guard migrate: {done['filled']} counters were already filled from the new "
            "layout's ledger: each kept the larger use, not the sum (right when that ledger "
            "holds the old layout's calls; when it does not, their old use is not added)",
            file=sys.stderr,
        )
    if done["skipped"]:
        print(
            f"usage-guard migrate: {done['skipped']} keys under the prefix are no counter or "
            "holds of the store and were left as they are",
            file=sys.stderr,
        )
    return 0
