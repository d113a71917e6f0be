"""Gemini's REST shape for the fake provider: `POST /v1beta/models/{model}:generateContent`,
`:streamGenerateContent?alt=sse`, `:countTokens` and `:batchEmbedContents`, as `google-genai`
calls them.

The answer writes `output_tokens` tokens (each " hello") and stops at the request's
`generationConfig.maxOutputTokens` with finish reason `MAX_TOKENS`; with a thinking budget
above 0 the first `reasoning_tokens` of them are reported as thoughts (`thoughtsTokenCount`,
beside `candidatesTokenCount`, as Gemini bills them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

    from fake_provider import FakeProvider

WORD = " hello"
PREFIXES = ("/v1beta/models/", "/v1/models/", "/v1alpha/models/")


def route(provider: FakeProvider, path: str) -> Optional[Any]:
    """The answering function for a Gemini path, or None when `path` is not one."""
    prefix = next((p for p in PREFIXES if path.startswith(p)), None)
    if prefix is None or ":" not in path:
        return None
    model, method = path[len(prefix) :].rsplit(":", 1)
    answers = {
        "generateContent": lambda h, body: _generate(provider, h, body, model, stream=False),
        "streamGenerateContent": lambda h, body: _generate(provider, h, body, model, stream=True),
        "countTokens": lambda h, body: _count(provider, h, body),
        "batchEmbedContents": lambda h, body: _embed(h, body),
    }
    return answers.get(method)


def _thinking_budget(body: dict[str, Any]) -> Optional[int]:
    config = body.get("generationConfig") or {}
    thinking = config.get("thinkingConfig") or {}
    budget = thinking.get("thinkingBudget", thinking.get("thinking_budget"))
    return int(budget) if isinstance(budget, int) else None


def _generate(
    provider: FakeProvider,
    h: BaseHTTPRequestHandler,
    body: dict[str, Any],
    model: str,
    stream: bool,
) -> None:
    from fake_provider import _send_json

    maximum = (body.get("generationConfig") or {}).get("maxOutputTokens")
    n, capped = provider._produce(maximum)
    budget = _thinking_budget(body)
    thoughts = min(provider.reasoning_tokens, n) if budget != 0 else 0
    finish = "MAX_TOKENS" if capped else "STOP"

    def usage(written: int, thought: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "promptTokenCount": provider.input_tokens,
            "candidatesTokenCount": written,
            "totalTokenCount": provider.input_tokens + written + thought,
        }
        if thought:
            out["thoughtsTokenCount"] = thought
        if provider.cached_tokens:
            out["cachedContentTokenCount"] = provider.cached_tokens
        return out

    def answer(text: str, reason: Optional[str], written: int, thought: int) -> dict[str, Any]:
        candidate: dict[str, Any] = {
            "content": {"parts": [{"text": text}], "role": "model"},
            "index": 0,
        }
        if reason:
            candidate["finishReason"] = reason
        return {
            "candidates": [candidate],
            "usageMetadata": usage(written, thought),
            "modelVersion": model,
            "responseId": "fake-gemini-1",
        }

    written = n - thoughts  # the thoughts are not in the text; Gemini bills them as output
    if not stream:
        _send_json(h, 200, answer(WORD * written, finish, written, thoughts))
        return
    events: list[tuple[Optional[str], Any]] = [
        (None, answer(WORD, None, i + 1, thoughts)) for i in range(written - 1)
    ]
    events.append((None, answer(WORD if written else "", finish, written, thoughts)))
    provider._sse(h, events, content_at=range(len(events)))


def _count(provider: FakeProvider, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    from fake_provider import _send_json

    _send_json(h, 200, {"totalTokens": provider.input_tokens})


def _embed(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    """One embedding per request of `batchEmbedContents`, with no usage (as Gemini answers)."""
    from fake_provider import _send_json

    requests = body.get("requests") or []
    _send_json(h, 200, {"embeddings": [{"values": [0.5, 0.25]} for _ in requests]})


def refusal_body(status: int, message: str, reason: str) -> dict[str, Any]:
    """Gemini's error shape: `{"error": {"code", "message", "status"}}`."""
    return {"error": {"code": status, "message": message, "status": reason}}
