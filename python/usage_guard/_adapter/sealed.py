"""A guarded stream's HTTP response, with its body sealed. A stream is billed from what passes
through its iterator (or, for Anthropic's `messages.stream`, from the message it accumulates),
so a body read straight off `stream.response` would reach the caller and be billed nothing.
The response handed out keeps everything else readable (headers, status code, the request id,
the URL, `close`); reading the body raises a TypeError that says to iterate the stream."""

from __future__ import annotations

import inspect
from typing import Any

# httpx's body readers (and their async twins), the raw byte stream under them, and the
# connection's own stream in `extensions["network_stream"]`.
_BODY = frozenset(
    {
        "iter_bytes",
        "iter_lines",
        "iter_text",
        "iter_raw",
        "read",
        "text",
        "content",
        "json",
        "aiter_bytes",
        "aiter_lines",
        "aiter_text",
        "aiter_raw",
        "aread",
        "stream",
        "extensions",
    }
)


class SealedResponse:
    """`response` of a guarded stream: the SDK's HTTP response without its body."""

    def __init__(self, response: Any):
        object.__setattr__(self, "_response", response)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name == "raise_for_status":
            # httpx's returns the response itself: it would hand back the unsealed one.
            return self._raise_for_status
        if name in _BODY:
            raise TypeError(
                f"response.{name}: the body of a guarded stream is read by iterating the "
                "stream (for chunk in stream, or the SDK's text_stream / get_final_message), "
                "where what it delivers is billed; its response gives headers, status_code "
                "and the request id only"
            )
        return getattr(self._response, name)

    def _raise_for_status(self) -> Any:
        self._response.raise_for_status()
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"response.{name}: the response of a guarded stream is read-only")

    def __repr__(self) -> str:
        return f"<sealed {self._response!r}>"


def seal(response: Any) -> Any:
    """`response` sealed (None and already sealed responses as they are)."""
    if response is None or isinstance(response, SealedResponse):
        return response
    return SealedResponse(response)


_SEALED_CLASSES: dict[type, type] = {}


def _sealed_class(cls: type) -> type:
    """A subclass of the SDK's stream class whose `response` is sealed."""
    sealed = _SEALED_CLASSES.get(cls)
    if sealed is not None:
        return sealed
    own = inspect.getattr_static(cls, "response", None)

    def response(self: Any) -> Any:
        if isinstance(own, property) and own.fget is not None:
            return seal(own.fget(self))
        return seal(vars(self).get("response"))

    namespace = {
        "response": property(response, doc="The HTTP response, its body sealed."),
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    sealed = type(cls.__name__, (cls,), namespace)
    _SEALED_CLASSES[cls] = sealed
    return sealed


def seal_stream(stream: Any) -> None:
    """Seals `stream.response` on an SDK stream object handed to the caller as is (Anthropic's
    `MessageStream`): its class becomes a subclass whose `response` is sealed, so that
    `isinstance` against the SDK's class still holds."""
    if stream is None or type(stream) in _SEALED_CLASSES.values():
        return
    stream.__class__ = _sealed_class(type(stream))
