"""`usage-guard recover`: lift the epoch fence after the counter store lost its state.

usage-guard recover --redis redis://cache:6379/0 --prefix ug --ledger ledger.db
usage-guard recover --redis redis://cache:6379/0 --attest
usage-guard recover --cluster redis://n1:7000 redis://n2:7001 --prefix ug --attest
usage-guard recover --cluster redis://n1:7000 --prefix ug --slot-groups --ledger ledger.db

With a ledger, the counters are filled again from it as they are next read. Without one,
`--attest` is the operator's statement that the counters may be trusted as they are
(restored, or knowingly started over); what was lost is not counted. See docs/redis.md,
"The epoch fence". Wire it into the main parser with `add_recover_command(subparsers)`; the
subcommand sets `func` (call it with the parsed arguments; it returns the exit status).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional, Union

from .._core import Guard, Policy, PostgresLedger, SqliteLedger
from ..errors import UsageLimitError
from ..ledger_url import open_ledger
from .common import add_redis_arguments, redis_store


def add_recover_command(subparsers: Any) -> argparse.ArgumentParser:
    """Adds `recover` to an `argparse` subparsers object and returns its parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "recover",
        help="lift the epoch fence after the counter store lost its state",
        description=(
            "Write a new epoch in the Redis counter store, lifting the fence that refuses "
            "fenced rules (budget_recovering) after a restart, failover or lost counter. "
            "Give the ledger to have counters filled again from it, or --attest."
        ),
    )
    add_redis_arguments(p)
    p.add_argument(
        "--ledger",
        metavar="URL",
        help="the usage ledger (sqlite:///relative.db, sqlite:////absolute.db, a file path, or "
        "postgres://...)",
    )
    p.add_argument(
        "--attest",
        action="store_true",
        help="without a ledger: attest that the counters may be trusted as they are",
    )
    p.set_defaults(func=recover)
    return p


def recover(args: argparse.Namespace) -> int:
    """Runs `recover`; prints the new epoch (exit 0) or why not (exit 1; 2 for bad usage)."""
    if args.ledger is None and not args.attest:
        print(
            "usage-guard recover: give --ledger to refill the counters, or --attest to "
            "trust them as they are",
            file=sys.stderr,
        )
        return 2
    try:
        store = redis_store(args)
    except ValueError as e:
        print(f"usage-guard recover: {e}", file=sys.stderr)
        return 2
    ledger: Optional[Union[SqliteLedger, PostgresLedger]] = None
    if args.ledger is not None:
        try:
            ledger = open_ledger(args.ledger)
        except (OSError, ValueError) as e:
            print(f"usage-guard recover: {e}", file=sys.stderr)
            return 2
    guard = Guard(Policy.from_dict({}), store=store, ledger=ledger)
    try:
        generation = guard.recover(attest=bool(args.attest))
    except UsageLimitError as e:
        print(f"usage-guard recover: {e}", file=sys.stderr)
        return 1
    print(f"recovered: new epoch {generation}")
    return 0
