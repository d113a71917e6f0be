"""`usage-guard usage`: usage from a ledger, grouped by user, team, model and day.

usage-guard usage --ledger ledger.db --user alice --since 2026-11-01
usage-guard usage --ledger postgres://app@db:5432/usage --group-by team,day --json

Wire it into the main parser with `add_usage_command(subparsers)`; the subcommand sets
`func` (call it with the parsed arguments; it returns the exit status).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any, Optional, Sequence, TextIO

from .._core import LedgerError
from ..ledger_url import open_ledger
from .common import instant

GROUPINGS = ("user", "team", "model", "day")
SUMS = (
    "requests",
    "tokens",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost",
    "compute_ms",
)


def _groupings(text: str) -> list[str]:
    words = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in GROUPINGS]
    if bad or not words:
        raise argparse.ArgumentTypeError(
            f"{text!r}: group by one or more of {', '.join(GROUPINGS)}, comma-separated"
        )
    return words


def add_usage_command(subparsers: Any) -> argparse.ArgumentParser:
    """Adds `usage` to an `argparse` subparsers object and returns its parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "usage",
        help="print usage from a ledger, grouped by user, team, model and day",
        description="Print usage recorded in a usage ledger.",
    )
    p.add_argument(
        "--ledger",
        required=True,
        help="sqlite:///relative.db, sqlite:////absolute.db, a SQLite file path, or postgres://…",
    )
    p.add_argument("--user", help="only this user")
    p.add_argument("--team", help="only calls billed to this team")
    p.add_argument("--model", help="only this model")
    p.add_argument("--since", type=instant, help="from this date or instant (UTC)")
    p.add_argument("--until", type=instant, help="up to (not including) this date or instant")
    p.add_argument(
        "--group-by",
        type=_groupings,
        default=list(GROUPINGS),
        help="comma-separated: user,team,model,day (default: all four)",
    )
    p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    p.set_defaults(func=run_usage)
    return p


def _cost(micros: int) -> str:
    """Dollars to the micro-dollar, always six decimals (exact: no float), so the column
    reads with one precision: `$1.500000`, `$0.000125`."""
    dollars, rest = divmod(micros, 1_000_000)
    return f"${dollars:,}.{rest:06d}"


def _table(groups: Sequence[Mapping[str, Any]], keys: list[str], out: TextIO) -> None:
    header = [*keys, *SUMS]
    rows = [
        [
            *("-" if g.get(k) is None else str(g[k]) for k in keys),
            *(_cost(g["cost_micros"]) if s == "cost" else f"{g[s]:,}" for s in SUMS),
        ]
        for g in groups
    ]
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    out.write("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip() + "\n")
    for r in rows:
        cells = [
            c.ljust(w) if i < len(keys) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))
        ]
        out.write("  ".join(cells).rstrip() + "\n")
    if not rows:
        out.write("(no usage)\n")


def run_usage(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    """Runs `usage`: prints the groups; returns 0, or 2 when the ledger cannot be read."""
    out = out or sys.stdout
    try:
        ledger = open_ledger(args.ledger)
        groups = ledger.query(
            user=args.user,
            team=args.team,
            model=args.model,
            since=args.since,
            until=args.until,
            group_by=args.group_by,
        )
    except (LedgerError, OSError, ValueError) as e:
        print(f"usage-guard usage: {e}", file=sys.stderr)
        return 2
    if args.json:
        for g in groups:
            out.write(json.dumps(g, sort_keys=True) + "\n")
    else:
        _table(groups, args.group_by, out)
    return 0
