"""How a plain call that ran ends: its answer billed (read off what the SDK returned; from the
JSON the provider sent when the SDK cannot read it), or its hold given back when the SDK call
raised without an answer."""

from __future__ import annotations

import inspect
import logging
from typing import Any

from .call import Call, settle_async, settle_sync

log = logging.getLogger("usage_guard")


def _answer_in(exc: BaseException) -> Any:
    """The answer an SDK error carries when the provider answered and the SDK raised on
    reading it: openai's `LengthFinishReasonError` from `parse` (the output maximum cut the
    structured answer short, which the guard's fit can cause), whose `completion` has the
    usage. Released, such a call would be billed nothing, however often it is repeated."""
    answer = getattr(exc, "completion", None)
    return answer if getattr(answer, "usage", None) is not None else None


def unread_answer(call: Call, result: Any) -> Any:
    """The answer as the provider sent it, read off `result` when the SDK could not read it
    (`Api.unread`); None when it cannot be had. Never raises: the call has run."""
    if call.api.unread is None:
        return None
    try:
        body = call.api.unread(result)
    except Exception as exc:
        log.warning("usage_guard: cannot read the answer the provider sent: %s", exc)
        return None
    return body if isinstance(body, dict) else None


def give_back_sync(call: Call, exc: BaseException, answer: Any = None) -> None:
    """A call whose SDK call raised: released, unless the provider's answer is known
    (`answer`, from `unread_answer`) or in the error (`_answer_in`), which is billed."""
    if answer is None and not call.stream:
        answer = _answer_in(exc)
    if answer is None:
        call.ticket.release()
    else:
        settle_sync(call, call.response_usage(answer), answer, call.response_capped(answer))


async def give_back_async(call: Call, exc: BaseException, answer: Any = None) -> None:
    """`give_back_sync` for asyncio."""
    if answer is None and not call.stream:
        answer = _answer_in(exc)
    if answer is None:
        await call.ticket.release_async()
    else:
        usage = call.response_usage(answer)
        await settle_async(call, usage, answer, call.response_capped(answer))


def settle_answer_sync(call: Call, result: Any) -> Any:
    """Bills a plain call's answer (`Api.answer` of what the SDK returned); returns what the
    guarded method answers."""
    try:
        answer = result if call.api.answer is None else call.api.answer(result)
    except BaseException as exc:
        # The provider answered and the SDK cannot read it: billed from what was sent. A raw
        # response is still handed over (its own parse() raises); anything else raises.
        answer = unread_answer(call, result)
        if answer is None or call.api.returns_answer:
            give_back_sync(call, exc, answer)
            raise
    settle_sync(call, call.response_usage(answer), answer, call.response_capped(answer))
    return answer if call.api.returns_answer else result


async def settle_answer_async(call: Call, result: Any) -> Any:
    """`settle_answer_sync` for asyncio."""
    try:
        answer = result if call.api.answer is None else call.api.answer(result)
        if inspect.isawaitable(answer):  # an async raw response's parse() (Anthropic's)
            answer = await answer
    except BaseException as exc:
        answer = unread_answer(call, result)
        if answer is None or call.api.returns_answer:
            await give_back_async(call, exc, answer)
            raise
    await settle_async(call, call.response_usage(answer), answer, call.response_capped(answer))
    return answer if call.api.returns_answer else result
