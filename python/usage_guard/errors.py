"""The exception hierarchy. The Rust core raises these; every refusal carries a `Refusal`."""

from __future__ import annotations

from typing import Any, Optional

__all__ = [
    "ContextWindowExceeded",
    "PolicyError",
    "UsageLimitDoesNotFit",
    "UsageLimitError",
    "UsageLimitsUnavailable",
]


class PolicyError(ValueError):
    """A policy document is invalid. `errors` lists every problem: path, value, message."""

    def __init__(self, message: str, errors: Optional[list[dict[str, str]]] = None) -> None:
        super().__init__(message)
        self.errors: list[dict[str, str]] = list(errors or [])


class UsageLimitError(Exception):
    """A call was refused because a usage limit has nothing left for it.

    Subclasses: `UsageLimitDoesNotFit` (something is left, not enough for this call) and
    `UsageLimitsUnavailable` (the counters cannot be checked right now).
    """

    def __init__(self, message: str, refusal: Any = None) -> None:
        super().__init__(message)
        self.refusal = refusal

    def _get(self, name: str, default: Any = None) -> Any:
        return getattr(self.refusal, name) if self.refusal is not None else default

    @property
    def message(self) -> str:
        return str(self)

    @property
    def reason(self) -> str:
        """`USAGE_LIMIT_REACHED`, `USAGE_LIMIT_DOES_NOT_FIT` or `USAGE_LIMITS_UNAVAILABLE`."""
        return self._get("reason", "USAGE_LIMIT_REACHED")

    @property
    def limit_type(self) -> Optional[str]:
        """direct, team, public, team_total, model_total, user_total or platform."""
        return self._get("limit_type")

    @property
    def metric(self) -> Optional[str]:
        return self._get("metric")

    @property
    def amount(self) -> Optional[int]:
        return self._get("amount")

    @property
    def window(self) -> Optional[str]:
        return self._get("window")

    @property
    def is_rate_limit(self) -> bool:
        """True when the refusing rule is a minute or hour (sliding) rule."""
        return bool(self._get("is_rate_limit", False))

    @property
    def resets_at(self) -> Optional[str]:
        """When the refusing rule next has room, ISO 8601 UTC."""
        return self._get("resets_at")

    @property
    def retry_after(self) -> Optional[int]:
        """Whole seconds until `resets_at`, from the moment of the refusal."""
        return self._get("retry_after")

    @property
    def unavailable(self) -> bool:
        return bool(self._get("unavailable", False))

    def to_http(self, provider: str = "openai") -> tuple[int, dict[str, str], Any]:
        """`(status, headers, body)` in the OpenAI, Anthropic or Ollama error shape."""
        if self.refusal is None:
            raise ValueError("this UsageLimitError carries no refusal to render")
        return self.refusal.to_http(provider)


class UsageLimitDoesNotFit(UsageLimitError):
    """Something is left, but not enough for this call (USAGE_LIMIT_DOES_NOT_FIT)."""


class UsageLimitsUnavailable(UsageLimitError):
    """The counters cannot be checked right now (HTTP 503 usage_limits_unavailable)."""


class ContextWindowExceeded(UsageLimitError):
    """The prompt does not fit in the model's context window or input limit
    (CONTEXT_WINDOW_EXCEEDED, HTTP 400 context_length_exceeded); refused before any provider
    saw the call."""
