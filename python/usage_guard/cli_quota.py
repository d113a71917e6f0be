"""`usage-guard quota ...` and `usage-guard init --preset ...`: stored quota policies from the
command line (docs/quotas.md).

usage-guard quota --ledger ledger.db list
usage-guard quota --ledger ledger.db create research \
    --limits '{"ai.cost": {"limit": 50, "window": "month"}}'
usage-guard quota --ledger ledger.db assign research team:research
usage-guard quota --ledger ledger.db --store redis://localhost:6379 usage team:research --json
usage-guard quota --ledger ledger.db --store redis://localhost:6379 \
    check user:alice ai.tokens.total 5000
usage-guard init --preset small --out quota-small.json [--ledger ledger.db --assign role:member]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from ._core import Guard, MemoryStore, Policy, RedisStore
from .ledger_url import open_ledger

if TYPE_CHECKING:
    from .quota import QuotaService

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
    from .quota import QuotaService  # with the command, not with every CLI start

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
    except (ValueError, KeyError, FileNotFoundError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 1


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
        p = q.create_policy(args.name, json.loads(args.limits), description=args.description)
        _emit(args, p, f"created {p['name']}: {_limits(p['limits'])}")
    elif args.action == "assign":
        q.assign(args.name, args.subject, effective_from=args.effective_from)
        _emit(
            args,
            {"policy": args.name, "subject": args.subject},
            f"assigned {args.name} to {args.subject}",
        )
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
        from .quota_model import AI_DIMENSIONS

        dims = [args.dimension] if args.dimension else list(AI_DIMENSIONS)
        usage = {d: q.usage(args.subject, d, user=args.user) for d in dims}
        rows = [
            [
                d,
                *(
                    str(u[k]) if u[k] is not None else "-"
                    for k in ("used", "limit", "remaining", "reset_at")
                ),
            ]
            for d, u in usage.items()
        ]
        _emit(args, usage, _table(rows, ["DIMENSION", "USED", "LIMIT", "REMAINING", "RESETS AT"]))
    else:
        d = q.check(args.subject, args.dimension, args.amount, team=args.team, role=args.role)
        value = {
            "allowed": d.allowed,
            "remaining": d.remaining,
            "reset_at": d.reset_at,
            "reason": d.reason,
        }
        _emit(args, value, "allowed" if d.allowed else f"refused: {d.reason} (resets {d.reset_at})")
        return 0 if d.allowed else 1
    return 0


def run_init(args: argparse.Namespace) -> int:
    """Writes the preset's policy (quotas.md's limits JSON) and, with --ledger, stores it."""
    name = f"preset-{args.preset}"
    document = {"name": name, "limits": PRESETS[args.preset]}
    with open(args.out or f"quota-{args.preset}.json", "w", encoding="utf-8") as f:
        json.dump(document, f, indent=2)
    print(f"wrote {f.name}: {_limits(PRESETS[args.preset])}")
    if args.ledger:
        args.store, args.prefix = None, None
        q = _service(args, create=True)
        q.create_policy(name, PRESETS[args.preset], description="usage-guard init")
        if args.assign:
            q.assign(name, args.assign)
        print(f"stored {name}" + (f", assigned to {args.assign}" if args.assign else ""))
    return 0


def add_quota_commands(commands: Any) -> None:
    """Adds `quota` and `init` to the main parser's subcommands."""
    quota = commands.add_parser(
        "quota", help="stored quota policies: list, show, create, assign, usage, check"
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
    create.add_argument("name")
    create.add_argument("--limits", required=True, help="quotas.md's limits JSON")
    create.add_argument("--description", default="")
    assign = actions.add_parser(
        "assign", help="assign a policy to team:<id>, user:<id> or role:<id>"
    )
    assign.add_argument("name")
    assign.add_argument("subject")
    assign.add_argument("--effective-from", help="ISO 8601 (default: now)")
    actions.add_parser("unassign", help="remove a subject's policy").add_argument("subject")
    actions.add_parser("disable", help="turn every stored quota off (every guard, within 1 s)")
    actions.add_parser("enable", help="turn the stored quotas back on")
    actions.add_parser("status", help="enabled, policies, assignments")
    usage = actions.add_parser("usage", help="used / limit / remaining / reset per dimension")
    usage.add_argument("subject")
    usage.add_argument("--dimension")
    usage.add_argument("--user", help="the member, for a role subject")
    check = actions.add_parser("check", help="whether an amount fits (exit 1 when refused)")
    check.add_argument("subject")
    check.add_argument("dimension")
    check.add_argument("amount", type=float, nargs="?", default=1)
    check.add_argument("--team")
    check.add_argument("--role")
    quota.set_defaults(func=run_quota)
    init = commands.add_parser("init", help="write a conservative starter quota policy")
    init.add_argument("--preset", choices=sorted(PRESETS), required=True)
    init.add_argument("--out", help="the file written (default quota-<preset>.json)")
    init.add_argument("--ledger", help="also store the policy in this ledger database")
    init.add_argument("--assign", help="and assign it to this subject (e.g. role:member)")
    init.set_defaults(func=run_init)
