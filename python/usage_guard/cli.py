"""The `usage-guard` command.

usage-guard demo                a simulated day on the in-memory store, with a manual clock
usage-guard check POLICY_FILE   validate a policy file and print every error, warning and
                                note, and the names each model answers to (--strict:
                                warnings fail too)
usage-guard audit --ledger URL  the events recorded in a ledger's audit log (--json)
usage-guard recover ...         lift the epoch fence after the counter store lost its state
usage-guard serve ...           the HTTP gateway (OpenAI, Anthropic, Ollama endpoints)
usage-guard dashboard ...       the usage dashboard for a library deployment (no gateway)
usage-guard quota ...           stored quota policies: list, show, create, assign, usage, check
usage-guard init --preset SIZE  write a conservative starter quota policy (small|medium|large)
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any, Optional, Sequence

from . import Policy, PolicyError, __version__
from .cli_audit import add_audit_command
from .cli_dashboard import add_dashboard_command
from .cli_quota import add_quota_commands
from .cli_recover import add_recover_command
from .cli_serve import add_serve_command
from .cli_usage import add_usage_command

if TYPE_CHECKING:
    from .cli_demo import EXAMPLE_POLICY, run_day

__all__ = ["EXAMPLE_POLICY", "build_parser", "check", "main", "run_day"]


def __getattr__(name: str) -> Any:
    """`EXAMPLE_POLICY` and `run_day` load with the demo (`cli_demo`, with `random`) on first
    use, not with every CLI start."""
    if name in ("EXAMPLE_POLICY", "run_day"):
        from . import cli_demo

        return getattr(cli_demo, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def format_error(error: dict[str, str]) -> str:
    """`path: message (got value)`, on one line."""
    message = "; ".join(part.strip() for part in error.get("message", "").splitlines())
    path, value = error.get("path", ""), error.get("value", "")
    text = f"{path}: {message}" if path else message
    return f"{text} (got {value})" if value else text


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


_PRICED_BY = {
    "policy": "priced by the policy",
    "file": "priced by settings.prices_file",
    "table": "priced by the built-in table",
}


def model_names_line(policy: Policy) -> str:
    """The names each model answers to and where its price comes from, and what happens to
    a model the policy does not declare: one line."""
    parts = []
    for m in policy.model_names:
        about = [f"also {', '.join(m['aliases'])}"] if m["aliases"] else []
        about.append(_PRICED_BY.get(m["prices"] or "", "no price"))
        parts.append(f"{m['id']} ({'; '.join(about)})")
    others = (
        "refused"
        if policy.unknown_models == "refuse"
        else 'allowed (settings.unknown_models = "allow"), with no per-model limit'
    )
    names = ", ".join(parts) or "none"
    return (
        f"models: {names}; each also by a snapshot name (-2024-08-06, -20241022, -latest), "
        f"with :latest, in any letter case; other models: {others}"
    )


def check(path: str, strict: bool = False) -> int:
    """Validates a policy file and prints a summary, every warning and every error. Exits 1
    on errors, and on warnings too when `strict`; else 0."""
    try:
        policy = Policy.load(path)
    except PolicyError as e:
        errors = e.errors or [{"path": "", "value": "", "message": str(e)}]
        print(f"{path}: {_count(len(errors), 'error')}")
        for error in errors:
            print(format_error(error))
        return 1
    models, teams, warnings = policy.models, policy.teams, policy.warnings
    summary = (
        f"{path}: valid ({_count(len(models), 'model')}: {', '.join(models) or '-'}; "
        f"{_count(len(teams), 'team')}: {', '.join(teams) or '-'})"
    )
    if warnings:
        failing = " (--strict: failing)" if strict else ""
        summary += f", {_count(len(warnings), 'warning')}{failing}"
    print(summary)
    print(model_names_line(policy))
    print(f"restart: {policy.restart_cost}")
    for note in policy.notes:
        print(f"note: {format_error(note)}")
    for warning in warnings:
        print(f"warning: {format_error(warning)}")
    for rule in policy.rules:
        print(f"rule {rule['name']!r}: {rule['sentence']}")
        if rule["overlaps"]:
            print(f"  overlaps: {', '.join(repr(name) for name in rule['overlaps'])}")
    return 1 if strict and warnings else 0


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
    add_serve_command(commands)
    add_dashboard_command(commands)
    add_quota_commands(commands)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "check":
            return check(args.policy_file, strict=args.strict)
        if args.command in ("usage", "audit", "recover", "serve", "dashboard", "quota", "init"):
            return int(args.func(args))
        from .cli_demo import run_day

        run_day()
        return 0
    except BrokenPipeError:  # e.g. `usage-guard demo | head`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
