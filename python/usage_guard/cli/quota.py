"""`usage-guard quota ...` and `usage-guard init --preset ...`: stored quota policies from the
command line (docs/quotas.md).

usage-guard quota --ledger ledger.db list
usage-guard quota --ledger ledger.db create research \
    --limits '{"ai.cost": {"limit": 50, "window": "month"}}'
usage-guard quota --ledger ledger.db create --limits @quota-small.json
usage-guard quota --ledger ledger.db assign research team:research [--replace]
usage-guard quota --ledger ledger.db --store redis://localhost:6379 usage team:research --json
usage-guard quota --ledger ledger.db --store redis://localhost:6379 \
    check user:alice ai.tokens.total 5000
usage-guard init --preset small --out quota-small.json [--ledger ledger.db --assign role:member]
    [--replace]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Optional

from .._core import Guard, LedgerError, MemoryStore, Policy, RedisStore
from ..errors import UsageLimitsUnavailable
from ..ledger_url import open_ledger
from .limits_json import read_limits

if TYPE_CHECKING:
    from ..quota import QuotaService

# Conservative starter limits (docs/quotas.md, "Presets"): one policy per deployment size.
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "small": {
        "ai.tokens.total": {"limit": 2_000_000, "window": "month"},
        "ai.cost": {"limit": 50.0, "window": "month"},
        "ai.rate": {"limit": 30, "window": "60s"},
        "ai.concurrency": {"limit": 2},
        "tools.invocations": {"limit": 1_000, "window": "day"},
    },
    "medium": {
        "ai.tokens.total": {"limit": 20_000_000, "window": "month"},
        "ai.cost": {"limit": 500.0, "window": "month"},
        "ai.rate": {"limit": 120, "window": "60s"},
        "ai.concurrency": {"limit": 8},
        "tools.invocations": {"limit": 10_000, "window": "day"},
    },
    "large": {
        "ai.tokens.total": {"limit": 200_000_000, "window": "month"},
        "ai.cost": {"limit": 5_000.0, "window": "month"},
        "ai.rate": {"limit": 600, "window": "60s"},
        "ai.concurrency": {"limit": 32},
        "tools.invocations": {"limit": 100_000, "window": "day"},
    },
}


def _service(args: argparse.Namespace, create: bool = False) -> QuotaService:
    """A service on the ledger's database (`create`: a new SQLite file is fine)."""
    from ..quota import QuotaService  # with the command, not with every CLI start

    store: Any = MemoryStore()
    if args.store:
        store = (
            RedisStore(args.store, prefix=args.prefix) if args.prefix else RedisStore(args.store)
        )
    guard = Guard(
        Policy.from_dict({"models": {}}),
        store=store,
        ledger=open_ledger(args.ledger, create=create),
    )
    return QuotaService(guard, poll=False)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    return "\n".join(lines)


def _limits(limits: dict[str, Any]) -> str:
    parts = []
    for dim, spec in limits.items():
        window = f"/{spec['window']}" if spec.get("window") else ""
        parts.append(f"{dim}={spec['limit']}{window}")
    return ", ".join(parts)


def _emit(args: argparse.Namespace, value: Any, text: str) -> None:
    print(json.dumps(value, indent=2, sort_keys=True) if args.json else text)


def run_quota(args: argparse.Namespace) -> int:
    """Runs one `quota` action; 0, or 1 when refused (check) or on bad input."""
    try:
        return _run(args, _service(args))
    except FAILURES as e:
        print(f"error: {_said(e)}", file=sys.stderr)
        return 1


def _said(e: BaseException) -> str:
    """An error's message for `error: ...` (an OSError's args are its number and text)."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename!r}: {e.strerror}" if e.filename else e.strerror
    return str(e.args[0]) if e.args else str(e)


# What a command reports as `error: ...` (exit 1) rather than a traceback: bad input, and a
# ledger or store that cannot be reached.
FAILURES = (ValueError, KeyError, OSError, LedgerError, UsageLimitsUnavailable)


def _create(args: argparse.Namespace, q: QuotaService) -> None:
    limits, named, described = read_limits(args.limits)
    name = args.name or named
    if not name:
        raise ValueError("name: give NAME, or @file.json of a document with a 'name'")
    description = args.description if args.description is not None else described or ""
    p = q.create_policy(name, limits, description=description)
    _emit(args, p, f"created {p['name']}: {_limits(p['limits'])}")


def assigned_policy(q: QuotaService, subject: str) -> Optional[str]:
    """The policy assigned to `subject` now, if any."""
    from ..quota.model import parse_subject

    kind, ident = parse_subject(subject)
    found = [a["policy"] for a in q.assignments() if a["subject"] == f"{kind}:{ident}"]
    return found[0] if found else None


def _replacing(q: QuotaService, name: str, subject: str, replace: bool) -> Optional[str]:
    """The policy an assignment of `name` to `subject` replaces; a ValueError when it
    replaces another one and `replace` was not given (nothing is changed)."""
    before = assigned_policy(q, subject)
    if before is not None and before != name and not replace:
        raise ValueError(
            f"{subject} has the policy {before!r} assigned; give --replace to assign {name!r} "
            "in its place (nothing was changed)"
        )
    return before if before != name else None


def _assign(args: argparse.Namespace, q: QuotaService) -> None:
    before = _replacing(q, args.name, args.subject, args.replace)
    q.assign(args.name, args.subject, effective_from=args.effective_from)
    text = f"assigned {args.name} to {args.subject}"
    _emit(
        args,
        {"policy": args.name, "subject": args.subject, "replaced": before},
        text + (f" (replacing {before})" if before else ""),
    )


def _usage(args: argparse.Namespace, q: QuotaService) -> None:
    from ..quota.calls import spoken
    from ..quota.model import AI_DIMENSIONS

    dims = [args.dimension] if args.dimension else list(AI_DIMENSIONS)
    usage = {d: q.usage(args.subject, d, user=args.user) for d in dims}

    def cell(d: str, value: Any) -> str:
        return "-" if value is None else value if isinstance(value, str) else spoken(d, value)

    rows = [
        [d, *(cell(d, u[k]) for k in ("used", "limit", "remaining", "reset_at"))]
        for d, u in usage.items()
    ]
    _emit(args, usage, _table(rows, ["DIMENSION", "USED", "LIMIT", "REMAINING", "RESETS AT"]))


def _check(args: argparse.Namespace, q: QuotaService) -> int:
    from ..quota.calls import spoken

    d = q.check(args.subject, args.dimension, args.amount, team=args.team, role=args.role)
    asked = int(args.amount)
    value = {
        "allowed": d.allowed,
        "asked": asked,
        "remaining": d.remaining,
        "unit": d.unit,
        "reset_at": d.reset_at,
        "reason": d.reason,
    }
    if d.allowed:
        left = (
            "no quota applies"
            if d.remaining is None
            else (f"{spoken(args.dimension, d.remaining)} left (resets {d.reset_at or '-'})")
        )
        text = f"allowed: {spoken(args.dimension, asked)} {args.dimension} fits; {left}"
    else:
        text = f"refused: {d.reason} (resets {d.reset_at or '-'})"
    _emit(args, value, text)
    return 0 if d.allowed else 1


def _run(args: argparse.Namespace, q: QuotaService) -> int:
    if args.action == "list":
        policies = q.policies()
        rows = [
            [p["name"], _limits(p["limits"]), ", ".join(p["subjects"]) or "-"] for p in policies
        ]
        _emit(args, policies, _table(rows, ["POLICY", "LIMITS", "ASSIGNED TO"]))
    elif args.action == "show":
        p = next((p for p in q.policies() if p["name"] == args.name), None)
        if p is None:
            q.store.policy(args.name)  # the KeyError naming the defined ones
        assert p is not None
        text = f"{p['name']}: {p['description'] or '-'}\n" + _table(
            [[d, str(s["limit"]), str(s.get("window") or "-")] for d, s in p["limits"].items()],
            ["DIMENSION", "LIMIT", "WINDOW"],
        )
        _emit(args, p, text + f"\nassigned to: {', '.join(p['subjects']) or '-'}")
    elif args.action == "create":
        _create(args, q)
    elif args.action == "assign":
        _assign(args, q)
    elif args.action == "unassign":
        had = q.unassign(args.subject)
        _emit(args, {"unassigned": had}, "unassigned" if had else f"{args.subject} had no policy")
    elif args.action == "delete":
        q.delete_policy(args.name)
        _emit(args, {"deleted": args.name}, f"deleted {args.name}")
    elif args.action in ("enable", "disable", "status"):
        if args.action != "status":
            getattr(q, args.action)()
        stats = q.stats()
        _emit(args, stats, " ".join(f"{k}={v}" for k, v in stats.items()))
    elif args.action == "usage":
        _usage(args, q)
    else:
        return _check(args, q)
    return 0


def run_init(args: argparse.Namespace) -> int:
    """Writes the preset's policy (quotas.md's limits JSON) and, with --ledger, stores it
    (and assigns it). A policy of that name stored with other limits, or another policy
    assigned to the subject, is replaced only with --replace; without it nothing is stored
    and the exit status is 1."""
    name = f"preset-{args.preset}"
    limits = PRESETS[args.preset]
    replaced: list[str] = []
    args.store, args.prefix = None, None
    out = args.out or f"quota-{args.preset}.json"
    try:
        if args.assign and not args.ledger:
            raise ValueError(
                f"--assign {args.assign}: assigning needs --ledger (where it is stored)"
            )
        # A file that cannot be written is an error before anything is stored; it is
        # written once the store took the preset (a refusal leaves it as it was).
        existed = os.path.exists(out)
        open(out, "a", encoding="utf-8").close()
        try:
            q = _service(args, create=True) if args.ledger else None
            if q is not None:
                replaced = _stored_preset(q, name, limits, args)
        except BaseException:
            if not existed:
                os.remove(out)
            raise
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"name": name, "limits": limits}, f, indent=2)
    except FAILURES as e:
        print(f"error: {_said(e)}", file=sys.stderr)
        return 1
    print(f"wrote {out}: {_limits(limits)}")
    if q is not None:
        said = f"stored {name}" + (f", assigned to {args.assign}" if args.assign else "")
        print(said + (f" ({'; '.join(replaced)})" if replaced else ""))
    return 0


def _stored_preset(
    q: QuotaService, name: str, limits: dict[str, Any], args: argparse.Namespace
) -> list[str]:
    """Stores (and assigns) the preset; what it replaced, in words."""
    from ..quota.model import check_limits

    existing = next((p for p in q.policies() if p["name"] == name), None)
    replaced = []
    before = _replacing(q, name, args.assign, args.replace) if args.assign else None
    if existing is not None and existing["limits"] != check_limits(limits):
        if not args.replace:
            raise ValueError(
                f"a policy {name!r} is stored already with other limits; give --replace to "
                "overwrite them (nothing was changed)"
            )
        replaced.append(f"replacing the limits of {name}")
    if existing is None:
        q.create_policy(name, limits, description="usage-guard init")
    elif replaced:
        q.update_policy(name, limits=limits)
    if args.assign:
        q.assign(name, args.assign)
        if before:
            replaced.append(f"replacing {before} on {args.assign}")
    return replaced


def add_quota_commands(commands: Any) -> None:
    """Adds `quota` and `init` to the main parser's subcommands."""
    quota = commands.add_parser(
        "quota",
        help="stored quota policies: list, show, create, assign, usage, check",
        description=(
            "Manage the quota policies stored in a ledger (docs/quotas.md): named limits "
            "assigned to teams, users or roles, which the guards with a QuotaService on that "
            "ledger enforce beside their own policy; read a subject's usage against them, or "
            "check whether an amount fits."
        ),
    )
    quota.add_argument(
        "--ledger", required=True, help="the ledger database (path, sqlite:///, postgres://)"
    )
    quota.add_argument("--store", help="a redis:// URL of the counter store (usage, check)")
    quota.add_argument("--prefix", help="the Redis key prefix the guards use")
    quota.add_argument("--json", action="store_true", help="JSON for scripts instead of tables")
    actions = quota.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    actions.add_parser("list", help="every policy and where it is assigned")
    for name in ("show", "delete"):
        actions.add_parser(name, help=f"{name} a policy").add_argument("name")
    create = actions.add_parser("create", help="store a named policy")
    create.add_argument("name", nargs="?", help="the policy's name (default: the file's name)")
    create.add_argument(
        "--limits",
        required=True,
        help="quotas.md's limits JSON, or @file.json (such as the file init --preset writes)",
    )
    create.add_argument("--description")
    assign = actions.add_parser(
        "assign", help="assign a policy to team:<id>, user:<id> or role:<id>"
    )
    assign.add_argument("name")
    assign.add_argument("subject")
    assign.add_argument("--effective-from", help="ISO 8601 (default: now)")
    assign.add_argument(
        "--replace", action="store_true", help="replace the subject's other policy, if any"
    )
    actions.add_parser("unassign", help="remove a subject's policy").add_argument("subject")
    actions.add_parser("disable", help="turn every stored quota off (every guard, within 1 s)")
    actions.add_parser("enable", help="turn the stored quotas back on")
    actions.add_parser("status", help="enabled, policies, assignments")
    usage = actions.add_parser("usage", help="used / limit / remaining / reset per dimension")
    usage.add_argument("subject")
    usage.add_argument("--dimension")
    usage.add_argument("--user", help="the member, for a role subject")
    check = actions.add_parser(
        "check",
        help="whether an amount (in the dimension's unit: micro-dollars for ai.cost) fits "
        "(exit 1 when refused)",
    )
    check.add_argument("subject")
    check.add_argument("dimension")
    check.add_argument("amount", type=float, nargs="?", default=1)
    check.add_argument("--team")
    check.add_argument("--role")
    quota.set_defaults(func=run_quota)
    init = commands.add_parser(
        "init",
        help="write a conservative starter quota policy",
        description=(
            "Write a starter quota policy for a preset (its limits JSON, for `quota create "
            "--limits @file`), and with --ledger store it there, with --assign assign it too "
            "(docs/quotas.md)."
        ),
    )
    init.add_argument("--preset", choices=sorted(PRESETS), required=True)
    init.add_argument("--out", help="the file written (default quota-<preset>.json)")
    init.add_argument("--ledger", help="also store the policy in this ledger database")
    init.add_argument("--assign", help="and assign it to this subject (e.g. role:member)")
    init.add_argument(
        "--replace",
        action="store_true",
        help="replace the subject's other policy, and a stored preset's other limits",
    )
    init.set_defaults(func=run_init)
