"""`usage-guard serve`: the HTTP gateway in front of the providers.

usage-guard serve --policy policy.toml --store redis://cache:6379/0 --ledger sqlite:///usage.db \\
    --listen 127.0.0.1:8080

The policy's `[providers.*]` say where each provider's calls go and `[gateway.keys.*]` which
API keys may call (see docs/gateway.md). Ctrl-C or SIGTERM stops taking calls (new ones get
503), lets the running ones finish (up to `gateway.drain_seconds`), bills them and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional, Union

from .._core import Gateway, Guard, Policy, PostgresLedger, SqliteLedger
from ..errors import PolicyError
from ..gateway import log_to_stderr_unless_configured, serve
from ..ledger_url import open_ledger
from .common import store_from_url


def add_serve_command(subparsers: Any) -> argparse.ArgumentParser:
    """Adds `serve` to an `argparse` subparsers object and returns its parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="run the HTTP gateway (OpenAI, Anthropic, Ollama endpoints) in front of providers",
        description=(
            "Serve OpenAI (/v1/chat/completions, /v1/responses, /v1/embeddings), Anthropic "
            "(/v1/messages) and Ollama (/api/chat, /api/generate, /api/embed) endpoints: each "
            "call is admitted and fitted before the provider sees it, and billed from the "
            "usage it reports."
        ),
    )
    p.add_argument("--policy", required=True, metavar="FILE", help="the policy (.toml or JSON)")
    p.add_argument(
        "--store",
        default="memory",
        metavar="URL",
        help="the counter store: memory (default) or redis://host:port/db",
    )
    p.add_argument("--prefix", default="ug", help="the Redis store's key prefix (default: ug)")
    p.add_argument(
        "--slot-groups",
        action="store_true",
        help="the Redis store places each owner's counters in a slot group (docs/redis.md)",
    )
    p.add_argument(
        "--lease-above",
        type=float,
        metavar="N",
        help="lease a counter every call shares (a Model Total) once this process reserves on "
        'it N times a second (0: at once); Redis stores only (docs/redis.md, "Leases")',
    )
    p.add_argument(
        "--ledger",
        metavar="URL",
        help="the usage ledger: sqlite:///relative.db, sqlite:////absolute.db or a file path "
        "(the file is created if missing, its directory must exist), or postgres://...",
    )
    p.add_argument(
        "--listen", default="127.0.0.1:8080", metavar="HOST:PORT", help="default 127.0.0.1:8080"
    )
    p.set_defaults(func=run_serve)
    return p


def run_serve(args: argparse.Namespace) -> int:
    """Runs `serve` until Ctrl-C or SIGTERM (exit 0); 1 when it cannot start."""
    log_to_stderr_unless_configured()
    try:
        policy = Policy.load(args.policy)
    except PolicyError as e:
        print(f"usage-guard serve: {e}", file=sys.stderr)
        return 1
    if args.lease_above is not None and not args.store.startswith(("redis://", "rediss://")):
        print(
            f"usage-guard serve: --lease-above needs a Redis store (--store redis://...), "
            f"not {args.store!r}",
            file=sys.stderr,
        )
        return 2
    try:
        store = store_from_url(args.store, args.prefix, args.slot_groups, args.lease_above)
    except ValueError as e:
        print(f"usage-guard serve: --lease-above: {e}", file=sys.stderr)
        return 2
    if store is None:
        print(
            f"usage-guard serve: --store {args.store!r}: accepted: memory, redis://...",
            file=sys.stderr,
        )
        return 2
    ledger: Optional[Union[SqliteLedger, PostgresLedger]] = None
    try:
        if args.ledger:
            ledger = open_ledger(args.ledger, create=True)
        guard = Guard(policy, store=store, ledger=ledger)

        def ready(gateway: Gateway) -> None:
            print(f"usage-guard serve: listening on {gateway.url}", flush=True)

        serve(guard, args.listen, on_ready=ready)
    except (ValueError, OSError) as e:
        print(f"usage-guard serve: {e}", file=sys.stderr)
        return 1
    print("usage-guard serve: stopped", flush=True)
    return 0
