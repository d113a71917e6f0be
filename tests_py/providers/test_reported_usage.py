"""`_core.reported_usage`: the core reads what each provider reported (one place for the
field names and the Anthropic cache arithmetic), from dicts and from the real SDK types, and
converts only the usage, never the answer."""

from __future__ import annotations

from typing import Any

import pytest
from usage_guard import _core
from usage_guard._adapter.anthropic import MESSAGES
from usage_guard._adapter.ollama import CHAT as OLLAMA_CHAT
from usage_guard._adapter.ollama import EMBED as OLLAMA_EMBED
from usage_guard._adapter.openai import CHAT, EMBEDDINGS, RESPONSES


def usage(inp: int, out: int, cached: int = 0, reasoning: int = 0) -> dict[str, int]:
    return {
        "input_tokens": inp,
        "output_tokens": out,
        "cached_input_tokens": cached,
        "reasoning_tokens": reasoning,
    }


class Unconvertible:
    """Anything the JSON conversion refuses: present beside the usage, it must not be read."""


CASES: list[tuple[str, Any, Any]] = [
    (
        CHAT.word,
        {
            "choices": [{"message": {"content": Unconvertible()}}],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 20,
                "prompt_tokens_details": {"cached_tokens": 4},
                "completion_tokens_details": {"reasoning_tokens": 5},
            },
        },
        usage(10, 20, 4, 5),
    ),
    (
        RESPONSES.word,
        {
            "type": "response.completed",
            "response": {
                "output": Unconvertible(),
                "usage": {"input_tokens": 7, "output_tokens": 9},
            },
        },
        usage(7, 9),
    ),
    (EMBEDDINGS.word, {"data": Unconvertible(), "usage": {"prompt_tokens": 8}}, usage(8, 0)),
    (
        MESSAGES.word,
        {
            "content": Unconvertible(),
            "usage": {
                "input_tokens": 5,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 20,
                "output_tokens": 30,
            },
        },
        usage(125, 30, 100),
    ),
    (
        MESSAGES.word,
        {"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}},
        usage(3, 1),
    ),
    (
        OLLAMA_CHAT.word,
        {"done": True, "message": Unconvertible(), "prompt_eval_count": 12, "eval_count": 13},
        usage(12, 13),
    ),
    (OLLAMA_EMBED.word, {"embeddings": Unconvertible(), "prompt_eval_count": 6}, usage(6, 0)),
    (CHAT.word, {"choices": [{"delta": {"content": "x"}}]}, None),
    (OLLAMA_CHAT.word, {"done": False, "message": {"content": "x"}}, None),
]


@pytest.mark.parametrize(("word", "carrier", "expected"), CASES)
def test_reads_only_the_usage(word: str, carrier: Any, expected: Any) -> None:
    assert _core.reported_usage(carrier, word) == expected  # type: ignore[arg-type]


def test_reads_sdk_objects() -> None:
    openai_types = pytest.importorskip("openai.types.chat")
    anthropic_types = pytest.importorskip("anthropic.types")
    completion = openai_types.ChatCompletion.model_validate(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "hi"},
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
    )
    assert _core.reported_usage(completion, "openai") == usage(3, 2)
    message = anthropic_types.Message.model_validate(
        {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "claude",
            "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 4, "output_tokens": 2, "cache_read_input_tokens": 6},
        }
    )
    assert _core.reported_usage(message, "anthropic") == usage(10, 2, 6)


def test_bad_provider_word_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="provider"):
        _core.reported_usage({}, "openia")  # type: ignore[arg-type]
