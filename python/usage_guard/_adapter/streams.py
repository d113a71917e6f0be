"""The guarded streams: a provider's stream (or generator) that bills when it ends, breaks, is
closed or is dropped, from what passed through its iterator. Only that iterator is metered:
the generator protocol (`send`, `throw`, `asend`, `athrow`, the `gi_*` / `ag_*` frames) is not
passed through, since chunks read that way would reach the caller unseen, and a lazy stream
whose generator was run anyway is billed its prompt rather than released."""

from __future__ import annotations

import dis
import inspect
from types import GenericAlias
from typing import Any

from .call import Call, StreamState, attach_pending, settle_async, settle_sync
from .sealed import seal

__all__ = ["AsyncGuardedStream", "GuardedStream", "advanced"]

# The generator protocol of the provider's stream: refused (its chunks would not be seen).
_GENERATOR = frozenset({"send", "throw", "asend", "athrow"})
_FRAMES = ("gi_", "ag_", "cr_")

# The attributes a settled stream carries (`call.attach`), copied to the object it echoes to.
_USAGE = (
    "usage_limits",
    "usage_restriction",
    "usage_billed",
    "usage_warnings",
    "usage_degraded",
    "usage_resolution",
)


def advanced(inner: Any) -> bool:
    """Whether `inner`, a generator or async generator, was run past its start (by anyone);
    False for anything else. Read before the guard closes it."""
    if inspect.isgenerator(inner):
        return inspect.getgeneratorstate(inner) != inspect.GEN_CREATED
    if inspect.isasyncgen(inner):
        state = getattr(inspect, "getasyncgenstate", None)  # Python 3.12 and later
        if state is not None:
            return bool(state(inner) != inspect.AGEN_CREATED)  # type: ignore[attr-defined]
        frame = inner.ag_frame
        return bool(inner.ag_running or frame is None or not _at_start(frame))
    return False


def _at_start(frame: Any) -> bool:
    """Whether a generator's frame has not run yet (Python 3.11 has no `getasyncgenstate`):
    its last instruction is the one that made the generator (3.10 and earlier: none)."""
    if frame.f_lasti < 0:
        return True
    instructions = dis.get_instructions(frame.f_code)
    made = next((i.offset for i in instructions if i.opname == "RETURN_GENERATOR"), 0)
    return bool(frame.f_lasti <= made)


class _StreamProxy:
    """What the sync and async guarded streams share: the call, the provider's stream (its
    other attributes pass through), what was delivered, and the `usage_*` attributes set
    once it settles."""

    def __init__(self, call: Call, inner: Any):
        self._call = call
        self._inner = inner
        self._iter: Any = None
        self._state = StreamState()
        self._settled = False
        # An SDK helper's stream wrapped around this one (`chat.completions.stream(...)`):
        # given the `usage_*` attributes too when this one settles.
        self._echo: Any = None
        attach_pending(self)

    def __class_getitem__(cls, item: Any) -> GenericAlias:
        """Generic for annotations (`GuardedStream[ChatCompletionChunk]`), as the SDKs'
        streams are."""
        return GenericAlias(cls, item)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in _GENERATOR or name.startswith(_FRAMES):
            raise AttributeError(
                f"stream.{name}: a guarded stream is read by iterating it (for chunk in "
                "stream, next(stream), async for, anext), where what it delivers is billed; "
                "the generator protocol (send, throw, asend, athrow, its frame) is not passed "
                "through"
            )
        value = getattr(self._inner, name)
        # The body read off the HTTP response would bypass the iterator, which bills it.
        return seal(value) if name == "response" else value

    def _unobserved(self) -> bool:
        """The provider's generator was run by something other than this stream's iterator
        (so what it delivered is unknown): billed the prompt, never released."""
        return self._iter is None and advanced(self._inner)

    def _echoed(self) -> None:
        if self._echo is not None:
            for name in _USAGE:
                try:
                    object.__setattr__(self._echo, name, getattr(self, name, None))
                except (AttributeError, TypeError):  # pragma: no cover - no __dict__
                    pass


class GuardedStream(_StreamProxy):
    """A provider stream that bills when it ends, breaks, is closed or is dropped."""

    def __iter__(self) -> GuardedStream:
        return self

    def __next__(self) -> Any:
        if self._iter is None:
            self._iter = iter(self._inner)
        while True:
            try:
                chunk = next(self._iter)
            except StopIteration:
                self._settle(completed=True)
                raise
            except BaseException:
                self._settle(completed=False)
                raise
            if self._call.shown(self._state, chunk):
                return chunk

    def _settle(self, completed: bool, unobserved: bool = False) -> None:
        if self._settled:
            return
        self._settled = True
        call, state = self._call, self._state
        state.unobserved = unobserved
        settle_sync(call, call.stream_usage(state, completed), self, call.stream_capped(state))
        self._echoed()

    def close(self) -> None:
        unobserved = self._unobserved()
        try:
            close = getattr(self._inner, "close", None)
            if callable(close):
                close()
        finally:
            self._settle(completed=False, unobserved=unobserved)

    def __enter__(self) -> GuardedStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not getattr(self, "_settled", True):
                self._settle(completed=False, unobserved=self._unobserved())
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


class AsyncGuardedStream(_StreamProxy):
    """An async provider stream that bills when it ends, breaks, is closed or is dropped."""

    def __aiter__(self) -> AsyncGuardedStream:
        return self

    async def __anext__(self) -> Any:
        if self._iter is None:
            self._iter = self._inner.__aiter__()
        while True:
            try:
                chunk = await self._iter.__anext__()
            except StopAsyncIteration:
                await self._settle(completed=True)
                raise
            except BaseException:
                await self._settle(completed=False)
                raise
            if self._call.shown(self._state, chunk):
                return chunk

    async def _settle(self, completed: bool, unobserved: bool = False) -> None:
        if self._settled:
            return
        self._settled = True
        call, state = self._call, self._state
        state.unobserved = unobserved
        await settle_async(
            call, call.stream_usage(state, completed), self, call.stream_capped(state)
        )
        self._echoed()

    async def close(self) -> None:
        unobserved = self._unobserved()
        try:
            close = getattr(self._inner, "aclose", None) or getattr(self._inner, "close", None)
            if callable(close):
                await close()
        finally:
            await self._settle(completed=False, unobserved=unobserved)

    aclose = close

    async def __aenter__(self) -> AsyncGuardedStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __del__(self) -> None:
        # No loop to await on here: bill with the blocking call (it releases the GIL).
        try:
            if not getattr(self, "_settled", True):
                self._settled = True
                call, state = self._call, self._state
                state.unobserved = self._unobserved()
                settle_sync(call, call.stream_usage(state, False), self, call.stream_capped(state))
                self._echoed()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass
