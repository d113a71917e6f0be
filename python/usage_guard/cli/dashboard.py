"""`usage-guard dashboard`: the usage dashboard for a library deployment (no gateway).

usage-guard dashboard --policy policy.toml --store redis://cache:6379/0 \\
    --ledger sqlite:////var/lib/usage-guard/usage.db --listen 127.0.0.1:8090

Serves `/dashboard` and the admin API it reads (the gateway's server with no model
endpoints) on the same counter store and ledger as the application's guards. The admin token
is the value of the variable the policy's `gateway.admin_token_env` names. Ctrl-C or SIGTERM
stops it (exit 0). See docs/dashboard.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Union

from .._core import (
    Gateway,
    Guard,
    LedgerError,
    Policy,
    PostgresLedger,
    SqliteLedger,
)
from ..errors import PolicyError
from ..gateway import log_to_stderr_unless_configured, serve
from ..ledger_url import open_ledger
from .common import store_from_url


def add_dashboard_command(subparsers: Any) -> argparse.ArgumentParser:
    """Adds `dashboard` to an `argparse` subparsers object and returns its parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "dashboard",
        help="serve the usage dashboard and the admin API for a library deployment",
        description=(
            "Serve /dashboard (usage over time per user, team and model from the ledger, "
            "each rule's live counter from the store, a page per user) and the admin API it "
            "reads, on the counter store and ledger the application's guards use."
        ),
    )
    p.add_argument("--policy", required=True, metavar="FILE", help="the policy (.toml or JSON)")
    p.add_argument(
        "--store",
        default="memory",
        metavar="URL",
        help="the counter store the application uses: redis://host:port/db (memory: "
        "counters filled from the ledger only)",
    )
    p.add_argument("--prefix", default="ug", help="the Redis store's key prefix (default: ug)")
    p.add_argument(
        "--slot-groups",
        action="store_true",
        help="the Redis store places each owner's counters in a slot group (docs/redis.md)",
    )
    p.add_argument(
        "--ledger",
        required=True,
        metavar="URL",
        help="the usage ledger: sqlite:///relative.db, sqlite:////absolute.db, a SQLite file "
        "path, or postgres://...",
    )
    p.add_argument(
        "--listen", default="127.0.0.1:8090", metavar="HOST:PORT", help="default 127.0.0.1:8090"
    )
    p.set_defaults(func=run_dashboard)
    return p


def _fail(message: str, status: int = 1) -> int:
    print(f"usage-guard dashboard: {message}", file=sys.stderr)
    return status


def run_dashboard(args: argparse.Namespace) -> int:
    """Runs `dashboard` until Ctrl-C or SIGTERM (exit 0); 1 when it cannot start, 2 for a
    wrong argument."""
    log_to_stderr_unless_configured()
    try:
        policy = Policy.load(args.policy)
    except PolicyError as e:
        return _fail(str(e))
    try:
        store = store_from_url(args.store, args.prefix, args.slot_groups)
        if store is None:
            return _fail(f"--store {args.store!r}: accepted: memory, redis://...", 2)
        ledger: Union[SqliteLedger, PostgresLedger] = open_ledger(args.ledger)
        guard = Guard(policy, store=store, ledger=ledger)

        def ready(gateway: Gateway) -> None:
            print(f"usage-guard dashboard: {gateway.url}/dashboard", flush=True)

        serve(guard, args.listen, on_ready=ready, dashboard_only=True)
    except (ValueError, OSError, LedgerError) as e:
        return _fail(str(e))
    print("usage-guard dashboard: stopped", flush=True)
    return 0
