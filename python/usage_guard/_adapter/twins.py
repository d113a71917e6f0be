"""What the guarded clients share for an SDK method's twins: a raw response's answer (parsed,
or its JSON when the SDK cannot parse it), a raw stream refused, and a method the guard
cannot meter refused outright."""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["no_raw_stream", "parsed", "raw_body", "refused"]


def parsed(raw: Any) -> Any:
    """The answer of a raw response (`with_raw_response.create`): parsed once, and cached by
    the SDK, so the caller's own `parse()` gets the same object, with the guard's attributes."""
    return raw.parse()


def raw_body(raw: Any) -> Any:
    """The answer as the provider sent it (its JSON), read off a raw response."""
    return raw.http_response.json()


def no_raw_stream(request: dict[str, Any], stream: bool) -> None:
    """A raw stream's chunks are read by the caller, never by the guard: refused rather than
    sent unmetered (`with_raw_response.create`, plain, is guarded)."""
    if stream:
        raise TypeError(
            "stream: with_raw_response.create(stream=True) is not guarded; call "
            "create(stream=True) on the guarded client (its stream is metered)"
        )


def refused(what: str, how: str) -> Callable[..., Any]:
    """A stand-in for an SDK method the guard cannot meter: raises a TypeError naming it and
    what to call instead; nothing is sent."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"usage_guard: {what} is not metered, so a guarded client refuses it; {how}"
        )

    return refuse
