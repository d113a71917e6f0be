"""The `usage-guard` command.

usage-guard demo                a simulated day on the in-memory store, with a manual clock
usage-guard check POLICY_FILE   validate a policy file and print every error, warning and
                                note, and the names each model answers to (--strict:
                                warnings fail too)
usage-guard audit --ledger URL  the events recorded in a ledger's audit log (--json)
usage-guard recover ...         lift the epoch fence after the counter store lost its state
usage-guard migrate ...         move a Redis store's counters from the shared layout into
                                slot groups
usage-guard serve ...           the HTTP gateway (OpenAI, Anthropic, Ollama endpoints)
usage-guard dashboard ...       the usage dashboard for a library deployment (no gateway)
usage-guard quota ...           stored quota policies: list, show, create, assign, usage, check
usage-guard init --preset SIZE  write a conservative starter quota policy (small|medium|large)

This module builds the parser and dispatches; each command is a module of this package that
adds its subparser (`policy_check`, `usage`, `audit`, `recover`, `migrate`, `serve`,
`dashboard`, `quota` with `init`, and `demo`, loaded only when run); `common` holds what
several commands share.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any, Optional, Sequence

from .. import __version__
from .audit import add_audit_command
from .dashboard import add_dashboard_command
from .migrate import add_migrate_command
from .policy_check import check
from .quota import add_quota_commands
from .recover import add_recover_command
from .serve import add_serve_command
from .usage import add_usage_command

if TYPE_CHECKING:
    from .demo import EXAMPLE_POLICY, run_day

__all__ = ["EXAMPLE_POLICY", "build_parser", "check", "main", "run_day"]


def __getattr__(name: str) -> Any:
    """`EXAMPLE_POLICY` and `run_day` load with the demo (`demo.py`, with `random`) on first
    use, not with every CLI start."""
    if name in ("EXAMPLE_POLICY", "run_day"):
        from . import demo

        return getattr(demo, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="usage-guard",
        description="Meter and enforce usage limits on LLM model calls.",
    )
    parser.add_argument("--version", action="version", version=f"usage-guard {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    commands.add_parser(
        "demo",
        help="run a simulated day for a few users and teams on the in-memory store",
        description=(
            "Run a short simulated day (alice, bob, carol, dave; teams research and support) "
            "against the example policy on the in-memory store with a manual clock, and "
            "print every call and the final usage per rule."
        ),
    )
    check_parser = commands.add_parser(
        "check",
        help="validate a policy file (.toml, else JSON) and print every error and warning",
        description=(
            "Validate a policy file. Prints every error and every warning (what is valid but "
            "probably not meant, such as an amount of 0). Exits 1 when the policy is invalid, "
            "or with --strict when it has warnings."
        ),
    )
    check_parser.add_argument("policy_file", metavar="POLICY_FILE")
    check_parser.add_argument(
        "--strict", action="store_true", help="exit 1 when the policy has warnings too"
    )
    add_usage_command(commands)
    add_audit_command(commands)
    add_recover_command(commands)
    add_migrate_command(commands)
    add_serve_command(commands)
    add_dashboard_command(commands)
    add_quota_commands(commands)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "check":
            return check(args.policy_file, strict=args.strict)
        commands = ("usage", "audit", "recover", "migrate", "serve", "dashboard", "quota")
        if args.command in (*commands, "init"):
            return int(args.func(args))
        from .demo import run_day

        run_day()
        return 0
    except BrokenPipeError:  # e.g. `usage-guard demo | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
