"""`usage-guard demo`: a simulated day for a few users and teams on the in-memory store, with a
manual clock, printing every call and the final usage per rule."""

from __future__ import annotations

import random
import sys
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Sequence

from .. import Guard, ManualClock, MemoryStore, Policy, UsageLimitError, __version__

if TYPE_CHECKING:
    from ..types import RuleUsage, Source  # annotations only: types.py is ~2 ms of TypedDicts

# A copy of examples/policy.toml, so that `usage-guard demo` works from any directory after
# `pip install .`.
EXAMPLE_POLICY = """\
# An example policy: two teams, a direct limit, public use, totals and a platform limit.

[models.gpt-5]
display_name = "GPT-5"
provider = "openai"
context_window = 400000
max_output_tokens = 128000
prices = { input = 1.25, cached_input = 0.125, output = 10.0 }   # dollars per million tokens

[models.claude-sonnet]
display_name = "Claude Sonnet"
provider = "anthropic"
context_window = 200000
max_output_tokens = 64000
prices = { input = 3.0, cached_input = 0.3, output = 15.0 }

[models.auto]
display_name = "Auto"
router = true                        # a router's own call skips counters that span models

[teams.research]
display_name = "Research"
members = ["alice", "bob"]

[teams.support]
display_name = "Support"
members = ["bob", "carol"]

[[limits.direct]]
user = "alice"
model = "gpt-5"
rules = [{ metric = "tokens", amount = 100000, window = "day" }]

[[limits.team]]                      # billing order: the order of these entries
team = "research"
model = "gpt-5"
shared = [{ metric = "cost", amount = 50.0, window = "month" }]        # dollars
each_member = [{ metric = "requests", amount = 60, window = "10 minutes" }]

[[limits.team]]
team = "support"
model = "claude-sonnet"
shared = [{ metric = "tokens", amount = 400000, window = "day" }]

[[limits.public]]
model = "gpt-5"
shared = [{ metric = "tokens", amount = 5000000, window = "day" }]
each_person = [{ metric = "tokens", amount = 20000, window = "day" }]

[[limits.team_total]]
team = "research"
rules = [{ metric = "cost", amount = 500.0, window = "month" }]

[[limits.model_total]]
model = "gpt-5"
rules = [{ metric = "tokens", amount = 50000000, window = "day" }]

[[limits.user_total]]
user = "alice"
rules = [{ metric = "cost", amount = 20.0, window = "week" }]

[limits.platform]                    # the General Platform Limit: per person, across all models
rules = [{ metric = "requests", amount = 600, window = "hour" }]

[settings]
anonymous = "unlimited"              # a call with no user (the platform's own) has no limits
"""

DEMO_START = "2026-11-30T08:00:00Z"
DEMO_USERS = ("alice", "bob", "carol", "dave")
DEMO_MODELS = ("gpt-5", "claude-sonnet", "auto")
DEMO_SEED = 20261130


class Call(NamedTuple):
    """One call of the simulated day."""

    at: str  # HH:MM, UTC, on the demo day
    user: str
    model: str
    prompt: int
    max_tokens: int
    repeat: int = 1  # the same call, this many times,
    every: int = 8  # seconds apart


# The day: alice runs through her direct limit on GPT-5 (capped, then refused); bob bursts
# past his team's 60 requests per 10 minutes and is passed on to public use, then back to the
# team as the window slides; bob and carol share the support team's daily tokens on Claude
# Sonnet until it refuses them both; dave runs through his public each-person tokens (capped,
# then refused); calls to the router `auto` skip the all-models counters.
DEMO_DAY: tuple[Call, ...] = (
    Call("08:05", "alice", "gpt-5", 30_000, 20_000),
    Call("08:40", "dave", "gpt-5", 2_000, 12_000),
    Call("09:10", "alice", "gpt-5", 25_000, 16_000),
    Call("09:30", "bob", "gpt-5", 100, 150, repeat=60),
    Call("09:39", "bob", "gpt-5", 300, 2_000),
    Call("09:42", "bob", "gpt-5", 1_000, 8_000),
    Call("10:15", "carol", "claude-sonnet", 40_000, 64_000),
    Call("10:50", "bob", "claude-sonnet", 60_000, 64_000),
    Call("11:20", "alice", "gpt-5", 8_000, 16_000),
    Call("11:45", "dave", "gpt-5", 2_000, 8_000),
    Call("12:30", "carol", "claude-sonnet", 50_000, 64_000),
    Call("13:10", "dave", "auto", 3_000, 4_000),
    Call("13:40", "bob", "claude-sonnet", 70_000, 64_000),
    Call("14:05", "carol", "claude-sonnet", 30_000, 32_000),
    Call("14:30", "alice", "gpt-5", 1_000, 2_000),
    Call("15:00", "dave", "gpt-5", 500, 4_000),
    Call("15:20", "bob", "claude-sonnet", 10_000, 8_000),
    Call("16:00", "alice", "claude-sonnet", 150_000, 64_000),
    Call("17:15", "bob", "gpt-5", 1_000, 2_000),
    Call("17:45", "alice", "auto", 500, 1_000),
)


class Row:
    """One printed line: a call, or a run of calls of the same kind (`first` to `last`).
    A plain class, not a dataclass: `dataclasses` (with `inspect`) would add ~8 ms to every
    `usage-guard demo`."""

    def __init__(
        self,
        first: str,
        last: str,
        user: str,
        model: str,
        asked: str,
        source: str,
        outcome: str,
    ) -> None:
        self.first, self.last, self.user, self.model = first, last, user, model
        self.asked, self.source, self.outcome = asked, source, outcome
        self.count = 1

    def same_kind(self, other: Row) -> bool:
        return (self.user, self.model, self.asked, self.source, self.outcome) == (
            other.user,
            other.model,
            other.asked,
            other.source,
            other.outcome,
        )


def _source(source: Source) -> str:
    return f"{source['type']}:{source['id']}"


def _amount(metric: str, value: Optional[int]) -> str:
    if value is None:
        return "-"
    if metric == "cost":
        return f"${value / 1_000_000:,.2f}"
    return f"{value:,}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, cell in enumerate(cells):
            last = i == len(cells) - 1
            if i in right:
                out.append(cell.rjust(widths[i]))
            else:
                out.append(cell if last else cell.ljust(widths[i]))
        return "  ".join(out).rstrip()

    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]


def _clock_at(clock: ManualClock, hhmm: str) -> None:
    clock.set(f"{DEMO_START[:10]}T{hhmm}:00Z")


def run_day(out: Any = None) -> Guard:
    """Runs the simulated day, printing the table of calls and the final usage; returns the
    guard (for tests)."""
    out = out or sys.stdout
    rng = random.Random(DEMO_SEED)
    clock = ManualClock(DEMO_START)
    store = MemoryStore()
    guard = Guard(Policy.from_toml(EXAMPLE_POLICY), store=store, clock=clock)
    rows: list[Row] = []
    last_source: dict[tuple[str, str], str] = {}
    for call in DEMO_DAY:
        for i in range(call.repeat):
            _clock_at(clock, call.at)
            clock.advance(i * call.every)
            row = _one_call(guard, clock, rng, call, last_source)
            if rows and rows[-1].same_kind(row):
                rows[-1].count += 1
                rows[-1].last = row.first
            else:
                rows.append(row)

    def p(text: str = "") -> None:
        print(text, file=out)

    p(f"usage_guard {__version__}: a simulated day on the in-memory store, {DEMO_START[:10]} (UTC)")
    p()
    table_rows = []
    for r in rows:
        when = r.first if r.count == 1 else f"{r.first}-{r.last}"
        user = r.user if r.count == 1 else f"{r.user} x{r.count}"
        table_rows.append([when, user, r.model, r.asked, r.source, r.outcome])
    header = ["time", "user", "model", "asked (prompt+max)", "source billed", "outcome"]
    for line in _table(header, table_rows, right={3}):
        p(line)

    p()
    p(f"Final usage per rule at {clock.now()} (used = billed; resets_at in UTC)")
    p()
    for line in _usage_table(guard):
        p(line)
    stats = guard.stats()
    p()
    p(
        f"{stats['admitted']} admitted, {stats['refused']} refused, {stats['billed']} billed, "
        f"{stats['released']} released; {len(store)} counters in the store."
    )
    return guard


def _usage_table(guard: Guard) -> list[str]:
    """The final usage per user, model and rule, as table lines."""
    usage_rows = []
    pairs = list(dict.fromkeys((c.user, c.model) for c in DEMO_DAY))
    for user, model in sorted(
        pairs, key=lambda um: (DEMO_USERS.index(um[0]), DEMO_MODELS.index(um[1]))
    ):
        view = guard.usage(user, model)
        source = _source(view["source"])
        checked = [("source", r) for r in view["rules"]] + [
            ("ceiling", r) for r in view["ceilings"]
        ]
        if not checked:
            usage_rows.append([user, model, source, "no limits", "", "", "", "", ""])
        for kind, rule in checked:
            metric = rule["metric"]
            usage_rows.append(
                [
                    user,
                    model,
                    source if kind == "source" else "(ceiling)",
                    _rule_name(rule),
                    f"{metric} / {rule['window']}",
                    _amount(metric, rule["amount"]),
                    _amount(metric, rule["used"]),
                    _amount(metric, rule["left"]),
                    rule["resets_at"] or "-",
                ]
            )
    header = [
        "user",
        "model",
        "source now",
        "rule",
        "metric / window",
        "amount",
        "used",
        "left",
        "resets_at",
    ]
    return _table(header, usage_rows, right={5, 6, 7})


def _rule_name(rule: RuleUsage) -> str:
    kind = rule["limit_type"]
    team = rule.get("team")
    return f"{kind} {team}" if team else kind


def _one_call(
    guard: Guard,
    clock: ManualClock,
    rng: random.Random,
    call: Call,
    last_source: dict[tuple[str, str], str],
) -> Row:
    when = clock.now()[11:16]
    asked = f"{call.prompt:,}+{call.max_tokens:,}"
    try:
        ticket = guard.admit(
            call.user, call.model, prompt_tokens=call.prompt, max_tokens=call.max_tokens
        )
    except UsageLimitError as refused:
        return Row(
            when,
            when,
            call.user,
            call.model,
            asked,
            "-",
            f"refused {refused.reason}: {refused}",
        )
    source = _source(ticket.source)
    ceiling = ticket.ceiling
    cap = ceiling["max_output_tokens"]
    outcome = "admitted"
    if cap < call.max_tokens:
        outcome = f"capped to {cap:,} output tokens"
    previous = last_source.get((call.user, call.model))
    if previous and previous != source and previous.startswith("team:"):
        outcome += f" ({previous} passed it on)"
    last_source[(call.user, call.model)] = source
    # The call runs: it answers with 60-100% of the output it was allowed; a capped call
    # stops at its cap.
    output = cap if cap < call.max_tokens else max(1, int(cap * rng.uniform(0.6, 1.0)))
    clock.advance(rng.randint(2, 6))
    ticket.bill(input_tokens=call.prompt, output_tokens=output)
    return Row(when, when, call.user, call.model, asked, source, outcome)
