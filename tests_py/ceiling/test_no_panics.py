"""No input reaches Python as a panic (issue 31, item 7). Images of hostile bytes are counted
(an estimate) through `count_prompt`, `fit` and `admit(request=...)` in every API that reads
them; a size in a fake header saturates instead of wrapping; and the last guard: a panic in
the core reaches Python as `usage_guard.InternalError` (a `RuntimeError`, caught by
`except Exception`), never as PyO3's `PanicException` (a `BaseException`)."""

from __future__ import annotations

import asyncio
import base64
import struct
from typing import Any

import pytest
import usage_guard as ug

# "RIFF", a size, "WEBP", a VP8X chunk tag and two bytes: 18 bytes, its header cut short.
WEBP = b"RIFF\x0a\x00\x00\x00WEBPVP8X\x00\x00"
# A PNG whose header claims 4-billion-pixel sides.
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR" + struct.pack(">II", 2**32 - 1, 2**32 - 1)


def with_image(provider: str, data: bytes) -> dict[str, Any]:
    b64 = base64.b64encode(data).decode()
    if provider == "anthropic":
        source = {"type": "base64", "media_type": "image/webp", "data": b64}
        content = [{"type": "image", "source": source}]
        return {
            "model": "claude-sonnet-4-5",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": content}],
        }
    if provider == "gemini":
        part = {"inlineData": {"mimeType": "image/png", "data": b64}}
        return {"contents": [{"role": "user", "parts": [part]}]}
    url = f"data:image/webp;base64,{b64}"
    content = [{"type": "image_url", "image_url": {"url": url}}]
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}


@pytest.mark.parametrize("provider", ["openai", "anthropic", "gemini"])
def test_a_truncated_webp_is_counted_not_a_panic(provider: str) -> None:
    request = with_image(provider, WEBP)
    try:
        counted = ug._core.count_prompt(request, provider=provider)
    except BaseException as e:  # a PanicException is not an Exception
        pytest.fail(f"count_prompt raised {type(e).__mro__}: {e}")
    assert counted["exact"] is False and counted["tokens"] > 0
    ceiling = {"tokens": 100_000, "max_output_tokens": 100}
    assert ug.fit(request, ceiling, provider=provider).prompt_tokens == counted["tokens"]


def test_admit_with_a_truncated_webp_admits() -> None:
    guard = ug.Guard(ug.Policy.from_dict({"models": {"gpt-4o": {"provider": "openai"}}}))
    try:
        ticket = guard.admit("alice", "gpt-4o", request=with_image("openai", WEBP))
    except BaseException as e:
        pytest.fail(f"admit raised {type(e).__mro__}: {e}")
    assert ticket.prompt is not None and ticket.prompt["tokens"] > 0
    ticket.release()


def test_a_huge_image_header_saturates_and_is_refused_by_the_window() -> None:
    many = with_image("gemini", PNG)
    many["contents"][0]["parts"] *= 2300
    counted = ug._core.count_prompt(many, provider="gemini", model="gemini-2.5-pro")
    assert counted["tokens"] == 2**64 - 1  # saturated, not wrapped to a small count
    policy = ug.Policy.from_dict({"models": {"gemini-2.5-pro": {"provider": "gemini"}}})
    guard = ug.Guard(policy)
    with pytest.raises(ug.ContextWindowExceeded):
        guard.admit("alice", "gemini-2.5-pro", request=many, provider="gemini")


def test_a_panic_reaches_python_as_internal_error() -> None:
    with pytest.raises(ug.InternalError) as caught:
        ug._core._panic("an invariant broke")
    assert isinstance(caught.value, RuntimeError)
    assert "internal error in _panic: an invariant broke" in str(caught.value)
    try:
        ug._core._panic("again")
    except Exception:  # the whole point: `except Exception` catches it
        pass


def test_a_panic_in_a_coroutine_resolves_its_future_with_internal_error() -> None:
    async def run() -> None:
        await ug._core._panic_async("a coroutine broke")

    with pytest.raises(ug.InternalError, match="a coroutine broke"):
        asyncio.run(asyncio.wait_for(run(), 10))
