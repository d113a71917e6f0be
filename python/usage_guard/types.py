"""The shapes of the plain dicts usage_guard returns and accepts, for annotations.

The values stay ordinary dicts at run time; these `TypedDict`s only describe their keys.
Every figure names its unit (docs/policy.md, "Units"): a key that holds one metric says it
(`input_tokens`, `cost_micros`, `compute_ms`), and a row that holds a figure of any metric
(`amount`, `used`, `reserved`, `left`, `budget`) carries `unit`. Money is always integer
micro-dollars (`micro_usd`: 1,000,000 is $1); only documents people write (a policy's cost
amounts and prices, a quota policy's `ai.cost` limit) are in dollars.

    from usage_guard.types import Ceiling, UsageView

    def show(ceiling: Ceiling, view: UsageView) -> None: ...

tests_py/package/test_boundary.py checks that every key here is a key the core writes, and back.
"""

from typing import Any, Literal, Optional, Protocol, TypedDict

__all__ = [
    "Action",
    "AuditEntry",
    "Billed",
    "EffectiveLimit",
    "Ceiling",
    "ErrorShape",
    "Event",
    "EventKind",
    "GuardedAnswer",
    "GuardedStreamAnswer",
    "LeaseState",
    "LedgerGroup",
    "LimitType",
    "Metric",
    "MetricFamily",
    "MetricSample",
    "Migrated",
    "PersonUsage",
    "PromptCount",
    "Provider",
    "QuotaUsage",
    "ReportedUsage",
    "Rates",
    "Reserved",
    "Restriction",
    "RuleUsage",
    "RuleWarning",
    "Source",
    "SourceType",
    "Unit",
    "UsageLimits",
    "UsageView",
]

# The API a request is sent in (`provider=`): src/ceiling/api.rs, with its aliases.
Provider = Literal[
    "openai",
    "openai.chat",
    "openai.completions",
    "openai.responses",
    "openai.embeddings",
    "anthropic",
    "gemini",
    "ollama",
    "ollama.chat",
    "ollama.generate",
    "ollama.embed",
    "ollama.embeddings",
]

# The provider error shapes a refusal renders in (`to_http(provider)`).
ErrorShape = Literal["openai", "anthropic", "ollama", "gemini"]

SourceType = Literal["direct", "team", "public"]

LimitType = Literal[
    "direct", "team", "public", "team_total", "model_total", "user_total", "platform", "rule"
]

# What a generic rule does past its budget (`[[rules]] action`).
Action = Literal["warn", "block", "throttle", "degrade", "halt_session"]

# What an event reports (src/guard/domain/event.rs).
EventKind = Literal[
    "soft_threshold", "over_budget", "shadow_refusal", "degrade", "throttle", "halt_session"
]

Metric = Literal[
    "tokens", "input_tokens", "output_tokens", "cost", "requests", "compute_ms", "concurrency"
]

# The unit of a metric's figures: tokens (tokens, input_tokens, output_tokens), micro_usd
# (cost: integer millionths of a dollar), requests, ms (compute_ms), calls (concurrency).
Unit = Literal["tokens", "micro_usd", "requests", "ms", "calls"]


class Rates(TypedDict):
    """A model's prices in dollars per million tokens."""

    input: float
    cached_input: float
    output: float


class Ceiling(TypedDict):
    """The `usage_ceiling` of a call (`Ticket.ceiling`, the `ceiling` of `fit`)."""

    tokens: Optional[int]
    cost_micros: Optional[int]
    rates: Optional[Rates]
    max_output_tokens: int
    min_output_tokens: int
    margin: float


class LeaseState(TypedDict):
    """This process's leases on a `RedisStore` (`RedisStore.lease_state()`)."""

    leases: int
    """Counters leased now."""
    unused: int
    """What the slices hold that no open call took: headroom other guards cannot use until
    the slices are renewed or given back (each counter's own unit, summed)."""


class Migrated(TypedDict):
    """What `RedisStore.migrate_from_shared` read and copied into the store's slot groups."""

    read: int
    """Keys of the shared layout read (counter buckets and holds keys)."""
    counters: int
    """Counter buckets whose use this run added or raised (0 on a second run)."""
    holds: int
    """Holds keys this run added to (0 on a second run)."""
    filled: int
    """Buckets the new layout had already filled from its ledger: the larger use was kept,
    not the sum (the ledger is taken to count the old layout's use)."""
    skipped: int
    """Keys under the store's names that are no counter or holds of it, left as they are."""


class Source(TypedDict):
    """The source a call is billed to."""

    type: SourceType
    id: str


class _RuleUsageKeys(TypedDict):
    limit_type: LimitType
    per_person: bool
    metric: Metric
    unit: Unit
    """The unit of `amount`, `used`, `reserved` and `left` (micro_usd for cost)."""
    window: str
    amount: int
    used: int
    reserved: int
    left: int
    resets_at: Optional[str]


class RuleUsage(_RuleUsageKeys, total=False):
    """One rule of the usage view: its amount, what is used, reserved and left."""

    team: str  # only on team rules


class Restriction(TypedDict):
    """The rule closest to its amount."""

    restricted_by: LimitType
    metric: Metric
    unit: Unit
    """The unit of `current_value` and `max_value`."""
    window: str
    current_value: int
    max_value: int


class UsageView(TypedDict):
    """`Guard.usage(user, model)`."""

    source: Source
    rules: list[RuleUsage]
    ceilings: list[RuleUsage]
    restriction: Optional[Restriction]


class PersonUsage(TypedDict):
    """`Guard.usage(user)` (no model): the person's view across models."""

    user: Optional[str]
    rules: list[RuleUsage]
    """The rules that count the person on every model: their User's Total Limit and the
    General Platform Limit (each also among the ceilings of every model's view)."""
    models: dict[str, UsageView]
    """By model id, in the policy's order: `Guard.usage(user, model)` of each model where a
    rule of its own applies to the person (a direct, team or public limit, a Model Total, a
    generic rule); models where only the all-models rules apply are left out."""


class Billed(TypedDict):
    """What a bill recorded (`Ticket.bill`, `BatchTicket.bill_part`)."""

    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cost_micros: int
    compute_ms: int
    recorded: Optional[bool]
    """`True`: the use is in the counters (exactly once). `None`: not known yet — on Redis a
    bill is queued and sent in the background unless `wait=True` (the guard's own `usage()`
    waits for it), or the counter store did not answer; the guard retries it in the
    background by ticket id until the store answers (for up to 5 minutes), and it counts
    exactly once if it lands at all. Never `False` for a bill that may still land."""


class Reserved(TypedDict, total=False):
    """What a ticket or batch holds, per metric: only the metrics its rules count, and never
    `compute_ms` (compute time is measured at the bill, not held)."""

    tokens: int
    input_tokens: int
    output_tokens: int
    cost_micros: int
    requests: int
    concurrency: int


class RuleWarning(TypedDict):
    """One of `Ticket.warnings`: a generic rule past a soft threshold (`warn_at`), or past its
    budget when it only reports (`action = "warn"`, or `settings.mode = "shadow"`)."""

    rule: str
    amount: Metric
    unit: Unit
    """The unit of `used` and `budget` (micro_usd for cost)."""
    used: int
    """What the rule's counter counts with this call's hold."""
    budget: int
    threshold: float
    """The highest `warn_at` reached, or 1.0 past the budget."""
    action: Action
    would_refuse: bool
    """True when the rule would have refused the call (shadow mode)."""


class Event(RuleWarning):
    """What `Guard.on_event` callbacks and `Guard.events()` iterators get: a warning that
    went out (once per window, counter and threshold across every guard of the store) or an
    action taken (`threshold` 1.0, `action` naming it)."""

    id: str
    """Unique across every guard of the store; the audit log's key."""
    at: str
    """When it went out, ISO 8601 UTC."""
    kind: EventKind
    counter: str
    """The counter and window bucket it is about."""
    principal: Optional[str]
    """The call's user, when it had one."""
    model: Optional[str]


class AuditEntry(TypedDict):
    """One row of `ledger.audit()`: an event the guard recorded in its ledger."""

    id: str
    at: str
    kind: str
    rule: str
    counter: str
    threshold: float
    principal: Optional[str]
    model: Optional[str]
    detail: dict[str, Any]
    """amount (the metric), unit, used, budget (integers in the unit), action, would_refuse."""


class _LedgerSums(TypedDict):
    requests: int
    tokens: int
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cost_micros: int
    compute_ms: int


class LedgerGroup(_LedgerSums, total=False):
    """One group of `ledger.query(...)`: the keys it was grouped by (None where the rows had
    none: a call billed to no team) and its sums."""

    user: Optional[str]
    team: Optional[str]
    model: Optional[str]
    day: Optional[str]


class QuotaUsage(TypedDict):
    """`QuotaService.usage(subject, dimension)`: `used` (reserved by running calls included),
    `limit`, `remaining` in `unit`, and when the window resets; all but `unit` None when no
    limit is assigned."""

    used: Optional[int]
    limit: Optional[int]
    remaining: Optional[int]
    reset_at: Optional[str]
    unit: Unit


class EffectiveLimit(TypedDict):
    """`QuotaService.effective_limit(...)`: the limit that binds (in `unit`), its window and
    the subject it is assigned to."""

    limit: int
    window: Optional[str]
    subject: str
    unit: Unit


class PromptCount(TypedDict):
    """`count_prompt(...)`: the prompt's tokens, whether exact, and the encoding used."""

    tokens: int
    exact: bool
    encoding: str


class ReportedUsage(TypedDict):
    """`_core.reported_usage(...)`: what a provider reported, in one shape. `input_tokens`
    includes the cached ones; `output_tokens` includes the reasoning ones."""

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    reasoning_tokens: int


# One sample of a metric family: its name (`..._total`, `..._bucket`, `..._sum`, `..._count`),
# its labels, its value.
MetricSample = tuple[str, dict[str, str], float]


class MetricFamily(TypedDict):
    """A value of `Guard.metrics()` (keyed by the family's name, `usage_guard_admitted`):
    the family's Prometheus type, help and samples."""

    type: Literal["counter", "gauge", "histogram"]
    help: str
    samples: list[MetricSample]


class _Capped(TypedDict):
    capped: bool
    """True when a usage limit cut the answer short (its output maximum was lowered to fit
    what was left and the answer stopped there)."""


class UsageLimits(_Capped, total=False):
    """A guarded answer's `usage_limits`: the usage view (`Guard.usage(user, model)`) read
    after the call was billed, with `capped`; only `capped` when the view could not be read."""

    source: Source
    rules: list[RuleUsage]
    ceilings: list[RuleUsage]
    restriction: Optional[Restriction]


class GuardedAnswer(Protocol):
    """What a guarded client sets on each answer it returns (the SDK's own object, with
    these attributes): `usage_guard.openai.GuardedChatCompletion` and its kin are the SDK's
    answer types with this protocol. Annotate with it to accept any guarded answer."""

    usage_limits: UsageLimits
    usage_restriction: Optional[Restriction]
    """The rule closest to its amount after the call (`usage_limits["restriction"]`)."""
    usage_billed: Optional[Billed]
    """What the call was billed (None when the bill failed and was logged)."""
    usage_warnings: list[RuleWarning]
    usage_degraded: Optional[str]
    """The model asked for, when a `degrade` rule sent another; else None."""
    usage_resolution: Optional[str]
    """`fallback(asked -> served, pre-attempt|post-attempt, unavailable)` when a fallback
    answered (clients with `fallbacks`); else None."""


class GuardedStreamAnswer(Protocol):
    """The same attributes on a guarded stream: set when the stream ends, breaks or is
    closed (billed then); None, and no warnings, until then (`usage_resolution` is known at
    once)."""

    usage_limits: Optional[UsageLimits]
    usage_restriction: Optional[Restriction]
    usage_billed: Optional[Billed]
    usage_warnings: list[RuleWarning]
    usage_degraded: Optional[str]
    usage_resolution: Optional[str]
