"""OpenTelemetry for a guard: its metrics through the OTel metrics API, and a span per
admission and bill, child of the caller's current span. Needs `opentelemetry-api`
(`pip install 'usage-guard[otel]'`); an SDK and exporter of your choice do the rest.

    from usage_guard.otel import instrument

    guard = instrument(ug.Guard(policy))           # the global meter and tracer providers
    client = GuardedOpenAI(OpenAI(), guard, user="alice")

`instrument` answers the guard wrapped: pass the wrapped guard to the guarded clients (or call
its `admit` yourself) for the spans and per-call instruments; everything else passes through.
The core's own counts (`Guard.metrics()`: every call of the guard and its clones, wrapped or
not) are observed at each collection.

Names follow the OpenTelemetry GenAI semantic conventions where one exists
(`gen_ai.client.token.usage` with `gen_ai.token.type`, `gen_ai.request.model`,
`gen_ai.provider.name`, `gen_ai.operation.name`), `usage_guard.*` otherwise.
"""

from __future__ import annotations

import time
from typing import Any, Optional, cast

try:
    from opentelemetry import metrics, trace
    from opentelemetry.trace import Status, StatusCode
except ImportError as exc:  # pragma: no cover - exercised by the wheel smoke test
    raise ImportError(
        "usage_guard.otel needs the opentelemetry-api package: "
        "pip install 'usage-guard[otel]' (or pip install opentelemetry-api)"
    ) from exc

from . import __version__
from ._core import Guard, _guard_policy
from ._otel_names import PROVIDERS, register_core
from .errors import UsageLimitError

__all__ = ["instrument", "InstrumentedGuard"]

_SCOPE = "usage_guard"


class _Instruments:
    """The instruments of one `instrument` call, and its tracer."""

    def __init__(self, guard: Guard, meter_provider: Any, tracer_provider: Any) -> None:
        meter = (meter_provider or metrics.get_meter_provider()).get_meter(_SCOPE, __version__)
        self.tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(
            _SCOPE, __version__
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens billed per call"
        )
        self.admissions = meter.create_counter(
            "usage_guard.admissions", unit="{call}", description="Admissions, by outcome"
        )
        self.reserved = meter.create_counter(
            "usage_guard.reserved.tokens", unit="{token}", description="Tokens held at admission"
        )
        self.cost = meter.create_counter(
            "usage_guard.billed.cost", unit="USD", description="Cost billed"
        )
        self.admit_time = meter.create_histogram(
            "usage_guard.admission.duration",
            unit="s",
            description="Time to admit a call, the store's round trips included",
        )

        # The core's counts, every call of the guard and its clones (wrapped or not).
        self.core = register_core(meter, guard)


def _call_attributes(user: Optional[str], model: str, provider: Optional[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"gen_ai.request.model": model}
    if provider:
        name, operation = PROVIDERS.get(provider, (provider, "chat"))
        out["gen_ai.provider.name"] = name
        out["gen_ai.operation.name"] = operation
    if user is not None:
        out["usage_guard.user"] = user
    return out


def _refusal_attributes(error: UsageLimitError) -> dict[str, Any]:
    out: dict[str, Any] = {"usage_guard.refused.reason": error.reason}
    for key in ("limit_type", "metric", "window", "amount"):
        value = getattr(error, key)
        if value is not None:
            out[f"usage_guard.refused.{key}"] = value
    return out


def _admitted_attributes(ticket: Any) -> dict[str, Any]:
    source = ticket.source
    out: dict[str, Any] = {
        "usage_guard.source.type": source["type"],
        "usage_guard.source.id": source["id"],
        "usage_guard.ticket": ticket.id,
    }
    for metric, amount in dict(ticket.reserved).items():
        out[f"usage_guard.reserved.{metric}"] = amount
    ceiling = ticket.ceiling
    if ceiling.get("tokens") is not None:
        out["usage_guard.ceiling.tokens"] = ceiling["tokens"]
    out["usage_guard.ceiling.max_output_tokens"] = ceiling["max_output_tokens"]
    return out


class InstrumentedTicket:
    """A ticket whose `bill` / `bill_async` make a span and record the billed tokens and
    cost; every other attribute is the ticket's."""

    def __init__(
        self,
        ticket: Any,
        instruments: _Instruments,
        attributes: dict[str, Any],
        metric_attributes: dict[str, Any],
    ):
        self._ticket = ticket
        self._instruments = instruments
        self._attributes = attributes
        self._metric_attributes = metric_attributes

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._ticket, name)

    def _billed(self, span: Any, billed: Any) -> None:
        if not billed:
            return
        base = self._metric_attributes
        for kind, key in (("input", "input_tokens"), ("output", "output_tokens")):
            self._instruments.tokens.record(billed[key], {**base, "gen_ai.token.type": kind})
            span.set_attribute(f"gen_ai.usage.{key}", billed[key])
        self._instruments.cost.add(billed["cost_micros"] / 1_000_000, base)
        span.set_attribute("usage_guard.billed.cost_micros", billed["cost_micros"])
        span.set_attribute("usage_guard.billed.reasoning_tokens", billed["reasoning_tokens"])

    def bill(self, *args: Any, **kwargs: Any) -> Any:
        with self._instruments.tracer.start_as_current_span(
            "usage_guard.bill", attributes=self._attributes
        ) as span:
            billed = self._ticket.bill(*args, **kwargs)
            self._billed(span, billed)
            return billed

    async def bill_async(self, *args: Any, **kwargs: Any) -> Any:
        with self._instruments.tracer.start_as_current_span(
            "usage_guard.bill", attributes=self._attributes
        ) as span:
            billed = await self._ticket.bill_async(*args, **kwargs)
            self._billed(span, billed)
            return billed


class InstrumentedGuard:
    """A guard whose `admit` / `admit_async` make a span (child of the caller's current span)
    and record the admission; tickets come back as `InstrumentedTicket`. Every other
    attribute is the guard's."""

    def __init__(self, guard: Guard, instruments: _Instruments) -> None:
        self._guard = guard
        self._instruments = instruments
        # The policy's model ids, by the policy version they were read at.
        self._models: tuple[int, frozenset[str]] = (-1, frozenset())

    def _metric_model(self, model: str) -> str:
        """`model` as a metric attribute: a model the policy declares, else `_OTHER`. The
        caller chooses the name asked for (refused, or admitted as an unknown model), so as
        a metric attribute as given it would make a new series per name."""
        version = self._guard.policy_version
        if self._models[0] != version:
            self._models = (version, frozenset(_guard_policy(self._guard).models))
        return model if model in self._models[1] else "_OTHER"

    @property
    def guard(self) -> Guard:
        """The guard itself (not instrumented)."""
        return self._guard

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._guard, name)

    def _start(self, user: Optional[str], model: str, kwargs: dict[str, Any]) -> Any:
        attributes = _call_attributes(user, model, kwargs.get("provider"))
        return attributes, self._instruments.tracer.start_as_current_span(
            "usage_guard.admit", attributes=attributes, record_exception=False
        )

    def _end(self, span: Any, attributes: dict[str, Any], started: float, outcome: Any) -> Any:
        took = time.perf_counter() - started
        base = {k: v for k, v in attributes.items() if k.startswith("gen_ai.")}
        asked = attributes["gen_ai.request.model"]
        model = asked if isinstance(outcome, UsageLimitError) else outcome.model
        base["gen_ai.request.model"] = self._metric_model(model)
        self._instruments.admit_time.record(took, base)
        if isinstance(outcome, UsageLimitError):
            refused = _refusal_attributes(outcome)
            span.set_attributes(refused)
            span.set_status(Status(StatusCode.ERROR, outcome.reason))
            self._instruments.admissions.add(
                1, {**base, "outcome": "refused", "usage_guard.refused.reason": outcome.reason}
            )
            return None
        admitted = _admitted_attributes(outcome)
        span.set_attributes(admitted)
        self._instruments.admissions.add(1, {**base, "outcome": "admitted"})
        tokens = dict(outcome.reserved).get("tokens")
        if tokens:
            self._instruments.reserved.add(tokens, base)
        return InstrumentedTicket(outcome, self._instruments, {**attributes, **admitted}, base)

    def admit(self, user: Optional[str], model: str, *args: Any, **kwargs: Any) -> Any:
        attributes, started_span = self._start(user, model, kwargs)
        with started_span as span:
            started = time.perf_counter()
            try:
                ticket = self._guard.admit(user, model, *args, **kwargs)
            except UsageLimitError as exc:
                self._end(span, attributes, started, exc)
                raise
            return self._end(span, attributes, started, ticket)

    async def admit_async(self, user: Optional[str], model: str, *args: Any, **kwargs: Any) -> Any:
        attributes, started_span = self._start(user, model, kwargs)
        with started_span as span:
            started = time.perf_counter()
            try:
                ticket = await self._guard.admit_async(user, model, *args, **kwargs)
            except UsageLimitError as exc:
                self._end(span, attributes, started, exc)
                raise
            return self._end(span, attributes, started, ticket)


def instrument(guard: Guard, meter_provider: Any = None, tracer_provider: Any = None) -> Guard:
    """`guard` with OpenTelemetry: its metrics on `meter_provider`'s meter and its spans on
    `tracer_provider`'s tracer (the global providers when None). Answers the guard wrapped
    (an `InstrumentedGuard`, typed as the `Guard` it stands for): hand it to the guarded
    clients. Instrument a guard once per meter provider (each call observes the core's
    counts again)."""
    if isinstance(guard, InstrumentedGuard):
        raise TypeError("guard: is already instrumented (instrument(guard.guard, ...) again)")
    if not isinstance(guard, Guard):
        raise TypeError(f"guard: must be a usage_guard.Guard, not {type(guard).__name__}")
    instrumented = InstrumentedGuard(guard, _Instruments(guard, meter_provider, tracer_provider))
    return cast(Guard, instrumented)
