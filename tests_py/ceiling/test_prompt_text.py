"""count_prompt reads every kind of str alike (CPython stores ASCII, Latin-1, BMP and astral
text at 1, 2 or 4 bytes a character; the extension reads the UTF-8 form CPython keeps in the
str) and counts it again the same on a recount, when the message comes from the per-message
cache and the str's UTF-8 form from the str itself. A lone surrogate (no UTF-8 form) is refused
with the path of the field."""

from __future__ import annotations

import pytest
import usage_guard as ug
from hypothesis import given, settings
from hypothesis import strategies as st


def prompt(messages: list[dict[str, str]]) -> int:
    request = {"model": "gpt-5", "messages": messages}
    return int(ug.count_prompt(request, "openai", "gpt-5")["tokens"])


def one(content: str) -> int:
    return prompt([{"role": "user", "content": content}])


@pytest.mark.parametrize(
    "unit", ["plain words ", "café naïve ", "日本語のテキスト", "🎉 emoji 🚀", "mixé 日本 🎉 "]
)
def test_each_str_kind_counts_as_count_tokens_then_the_same_from_the_cache(unit: str) -> None:
    framing = one("")
    content = unit * 100  # well over the cache's threshold
    assert one(content) == framing + ug.count_tokens(content)
    assert one(content) == framing + ug.count_tokens(content)  # cached, str read again
    # An equal str built anew (no UTF-8 form kept in it yet) finds the same entry.
    assert one("".join(list(content))) == framing + ug.count_tokens(content)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=200).filter(lambda t: not any(0xD800 <= ord(c) < 0xE000 for c in t)))
def test_any_text_counts_as_count_tokens_on_every_recount(text: str) -> None:
    framing = one("")
    content = text * 3
    expected = framing + ug.count_tokens(content)
    assert [one(content) for _ in range(3)] == [expected] * 3


def test_a_growing_chat_counts_as_its_messages_one_by_one() -> None:
    units = ["plain words ", "café ", "日本語", "🎉 🚀 "]
    chat = [
        {"role": ("user", "assistant")[i % 2], "content": f"{i} " + units[i % 4] * (40 + i)}
        for i in range(30)
    ]
    priming = prompt([])
    singles = [prompt([m]) - priming for m in chat]
    for turn in range(1, len(chat) + 1):
        assert prompt(chat[:turn]) == priming + sum(singles[:turn])


def test_lone_surrogates_are_refused_with_the_field() -> None:
    with pytest.raises(ValueError, match=r"request\.messages\[0\]\.content: must be text"):
        one("text \ud800 more")
    with pytest.raises(ValueError, match=r"request\.messages\[1\]: must be text without"):
        prompt([{"role": "user", "content": "a"}, {"role": "user", "k\udc00": "b"}])
