"""`usage-guard audit`: the events a guard recorded in its ledger's audit log.

usage-guard audit --ledger ledger.db --since 2026-11-01
usage-guard audit --ledger postgres://app@db:5432/usage --kind soft_threshold --json

Wire it into the main parser with `add_audit_command(subparsers)`; the subcommand sets
`func` (call it with the parsed arguments; it returns the exit status).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, Optional, TextIO

from .._core import LedgerError
from ..ledger_url import open_ledger
from .common import count, instant

if TYPE_CHECKING:
    from ..types import AuditEntry  # annotations only: types.py is ~2 ms of TypedDicts

KINDS = (
    "soft_threshold",
    "over_budget",
    "shadow_refusal",
    "degrade",
    "throttle",
    "halt_session",
    "store_epoch",
)
COLUMNS = ("at", "kind", "rule", "threshold", "principal", "model", "counter")


def add_audit_command(subparsers: Any) -> argparse.ArgumentParser:
    """Adds `audit` to an `argparse` subparsers object and returns its parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "audit",
        help="list the events (soft thresholds, warnings, actions) recorded in a ledger",
        description=(
            "List the events a guard recorded in its ledger's audit log, oldest first: soft "
            "thresholds reached, warn rules past their budget, shadowed refusals, calls "
            "degraded or throttled, sessions halted; and the counter store's epochs that guards "
            "wrote or trusted (store_epoch)."
        ),
    )
    p.add_argument(
        "--ledger",
        required=True,
        help="sqlite:///relative.db, sqlite:////absolute.db, a SQLite file path, or postgres://…",
    )
    p.add_argument("--since", type=instant, help="from this date or instant (UTC)")
    p.add_argument("--until", type=instant, help="up to (not including) this date or instant")
    p.add_argument("--kind", choices=KINDS, help="only events of this kind")
    p.add_argument("--rule", help="only events of this rule")
    p.add_argument("--limit", type=count, help="only the latest N events")
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    p.set_defaults(func=run_audit)
    return p


def _threshold(value: float) -> str:
    return f"{value * 100:g}%"


def _table(entries: list[AuditEntry], out: TextIO) -> None:
    rows = [
        [
            e["at"],
            e["kind"],
            e["rule"],
            _threshold(e["threshold"]),
            e["principal"] or "-",
            e["model"] or "-",
            e["counter"],
        ]
        for e in entries
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(COLUMNS)]
    out.write("  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths)).rstrip() + "\n")
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")


def run_audit(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    """Runs `audit`: prints the events; returns 0, or 2 when the ledger cannot be read."""
    out = out or sys.stdout
    try:
        entries = open_ledger(args.ledger).audit(
            since=args.since,
            until=args.until,
            kind=args.kind,
            rule=args.rule,
            limit=args.limit,
        )
    except (LedgerError, OSError, ValueError) as e:
        print(f"usage-guard audit: {e}", file=sys.stderr)
        return 2
    if args.json:
        for entry in entries:
            out.write(json.dumps(entry, sort_keys=True) + "\n")
    elif entries:
        _table(entries, out)
    else:
        out.write("(no events)\n")
    return 0
