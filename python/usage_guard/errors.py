"""The exception hierarchy. The Rust core raises these; every refusal carries a `Refusal`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from ._core import Refusal
    from .types import ErrorShape

__all__ = [
    "ContextWindowExceeded",
    "ModelNotFound",
    "PolicyError",
    "ProviderUnavailable",
    "UsageLimitDoesNotFit",
    "UsageLimitError",
    "UsageLimitHeld",
    "UsageLimitsUnavailable",
]


class PolicyError(ValueError):
    """A policy document is invalid. `errors` lists every problem: path, value, message."""

    def __init__(self, message: str, errors: Optional[list[dict[str, str]]] = None) -> None:
        super().__init__(message)
        self.errors: list[dict[str, str]] = list(errors or [])

    def __reduce__(self) -> tuple[Any, tuple[str, list[dict[str, str]]]]:
        return (type(self), (str(self), self.errors))


class UsageLimitError(Exception):
    """A call was refused because a usage limit has nothing left for it.

    Subclasses: `UsageLimitDoesNotFit` (something is left, not enough for this call),
    `UsageLimitHeld` (calls in progress hold the room; retry in a moment) and
    `UsageLimitsUnavailable` (the counters cannot be checked right now).
    """

    def __init__(self, message: str, refusal: Optional[Refusal] = None) -> None:
        super().__init__(message)
        self.refusal = refusal

    def __reduce__(self) -> tuple[Any, tuple[str, Optional[Refusal]]]:
        # Pickles with its refusal (Celery, multiprocessing): the default keeps only `args`.
        return (type(self), (str(self), self.refusal))

    @property
    def message(self) -> str:
        return str(self)

    @message.setter
    def message(self, value: str) -> None:
        # Frameworks rewrite an exception's message on its way out (LiteLLM's proxy does).
        self.args = (value, *self.args[1:])

    @property
    def reason(self) -> str:
        """`USAGE_LIMIT_REACHED`, `USAGE_LIMIT_DOES_NOT_FIT`, `USAGE_LIMIT_HELD`,
        `USAGE_LIMITS_UNAVAILABLE` or
        `USAGE_LIMITS_RECOVERING` (and the context-window / model codes of the subclasses)."""
        return self.refusal.reason if self.refusal is not None else "USAGE_LIMIT_REACHED"

    @property
    def limit_type(self) -> Optional[str]:
        """direct, team, public, team_total, model_total, user_total or platform."""
        return self.refusal.limit_type if self.refusal is not None else None

    @property
    def metric(self) -> Optional[str]:
        return self.refusal.metric if self.refusal is not None else None

    @property
    def amount(self) -> Optional[int]:
        return self.refusal.amount if self.refusal is not None else None

    @property
    def window(self) -> Optional[str]:
        return self.refusal.window if self.refusal is not None else None

    @property
    def is_rate_limit(self) -> bool:
        """True when the refusing rule is a minute or hour (sliding) rule."""
        return self.refusal is not None and self.refusal.is_rate_limit

    @property
    def resets_at(self) -> Optional[str]:
        """When the refusing rule next has room, ISO 8601 UTC."""
        return self.refusal.resets_at if self.refusal is not None else None

    @property
    def retry_after(self) -> Optional[int]:
        """Whole seconds until `resets_at`, from the moment of the refusal; for
        `UsageLimitHeld`, how long to wait before trying again (5)."""
        return self.refusal.retry_after if self.refusal is not None else None

    @property
    def unavailable(self) -> bool:
        return self.refusal is not None and self.refusal.unavailable

    @property
    def status_code(self) -> int:
        """The HTTP status of the refusal (429, 400 for a context window, 503 unavailable);
        what web frameworks and LiteLLM's proxy answer the caller with."""
        return self.to_http()[0] if self.refusal is not None else 429

    def to_http(self, provider: ErrorShape = "openai") -> tuple[int, dict[str, str], Any]:
        """`(status, headers, body)` in the OpenAI, Anthropic or Ollama error shape."""
        if self.refusal is None:
            raise ValueError("this UsageLimitError carries no refusal to render")
        return self.refusal.to_http(provider)


class UsageLimitDoesNotFit(UsageLimitError):
    """Something is left, but not enough for this call (USAGE_LIMIT_DOES_NOT_FIT)."""


class UsageLimitHeld(UsageLimitError):
    """The room is held by calls in progress, not used (USAGE_LIMIT_HELD, HTTP 429
    `usage_limit_held` with `x-should-retry: true`): without their holds this call would fit,
    and the room comes back as they end. Try again after `retry_after` seconds."""


class UsageLimitsUnavailable(UsageLimitError):
    """The counters cannot be checked right now (HTTP 503 usage_limits_unavailable), or the
    counter store lost the state of a fenced rule and it is being recovered (reason
    `USAGE_LIMITS_RECOVERING`, HTTP 503 budget_recovering; see docs/redis.md)."""


class ContextWindowExceeded(UsageLimitError):
    """The prompt does not fit in the model's context window or input limit
    (CONTEXT_WINDOW_EXCEEDED, HTTP 400 context_length_exceeded); refused before any provider
    saw the call."""


class ModelNotFound(UsageLimitError):
    """The model is not one of the policy's and the policy refuses unknown models
    (`settings.unknown_models = "refuse"`): MODEL_NOT_FOUND, HTTP 404 `model_not_found`
    (Anthropic `not_found_error`). Names only the model asked for."""


class ProviderUnavailable(Exception):
    """Every candidate of a call's fallback ladder is unavailable: its provider's breaker is
    open or its credential cools down (after a 429 or billing exhaustion). `until` is when
    the first of them may take calls again (ISO 8601 UTC), `retry_after` the whole seconds to
    then, `unavailable` one dict per candidate (provider, credential, reason, until)."""

    def __init__(self, message: str, unavailable: Optional[list[dict[str, Any]]] = None) -> None:
        super().__init__(message)
        self.unavailable: list[dict[str, Any]] = list(unavailable or [])

    def __reduce__(self) -> tuple[Any, tuple[str, list[dict[str, Any]]]]:
        return (type(self), (str(self), self.unavailable))

    @property
    def until(self) -> Optional[str]:
        first = min(self.unavailable, key=lambda u: int(u["until_ms"]), default=None)
        return None if first is None else str(first["until"])
