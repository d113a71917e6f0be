"""A small real HTTP server that answers like OpenAI, Anthropic and Ollama.

Endpoints: OpenAI `/v1/chat/completions`, `/v1/completions` (legacy: `prompt`, `max_tokens`
16 when absent), `/v1/responses`, `/v1/embeddings`; Anthropic
`/v1/messages`; Ollama `/api/chat`, `/api/generate`, `/api/embed`; Gemini
`/v1beta/models/{model}:generateContent`, `:streamGenerateContent`, `:countTokens`
(`fake_gemini`). Each answers plain or
streaming (SSE for OpenAI and Anthropic, NDJSON for Ollama) with realistic bodies and usage.

Knobs (attributes, change them between calls):
  output_tokens   how many output tokens the model "wants" to write; it stops earlier at the
                  request's output maximum, with the provider's "stopped at the maximum" reason
  input_tokens, cached_tokens, reasoning_tokens    the usage reported (Anthropic: with
                  thinking on, the first reasoning_tokens output tokens are thinking text)
  break_after     a streaming answer drops the connection after this many content chunks
  delay           seconds to wait before answering (compute time)
  chunk_delay     seconds to wait between the pieces of a streaming answer
  refusal         (status, headers, body) from `UsageLimitError.to_http`: every request is
                  answered with it
  script          answers for the next requests, one each, before the usual ones: a
                  (status, headers, body) tuple, or "drop" (the connection is closed unanswered)
  extra_headers   headers added to every answer (a provider's cookies, account headers, ...)
  chat_usage      replaces the `usage` object of OpenAI chat answers (plain and streamed)
  on_request      called with each `Recorded` request before it is answered, on the server's
                  thread (to look at the gateway meanwhile, or to sleep: a slow provider)
Every request is recorded in `requests` as `Recorded(method, path, headers, body, raw)`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional

import fake_gemini

# Each chunk is one token in o200k_base and cl100k_base.
WORD = " hello"
THINK = " think"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes = b""  # the body's bytes as received


class FakeProvider:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.output_tokens = 12
        self.input_tokens = 21
        self.cached_tokens = 0
        self.reasoning_tokens = 0
        self.break_after: Optional[int] = None
        self.delay = 0.0  # seconds before answering
        self.chunk_delay = 0.0  # seconds between streamed pieces
        self.refusal: Optional[tuple[int, dict[str, str], Any]] = None
        self.script: list[Any] = []
        self.extra_headers: dict[str, str] = {}
        self.chat_usage: Optional[Any] = None
        self.delta_usage: Optional[dict[str, Any]] = None  # added to Anthropic's message_delta
        self.on_request: Optional[Callable[[Recorded], None]] = None
        self._lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def end_headers(self) -> None:
                for name, value in provider.extra_headers.items():
                    self.send_header(name, value)
                super().end_headers()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                headers = {k.lower(): v for k, v in self.headers.items()}
                recorded = Recorded("POST", self.path, headers, body, raw)
                with provider._lock:
                    provider.requests.append(recorded)
                if provider.on_request is not None:
                    provider.on_request(recorded)
                try:
                    provider._answer(self, self.path.split("?")[0], body or {})
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeProvider:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
        self.refusal = None
        with self._lock:
            self.script.clear()
        self.break_after = None
        self.delay = 0.0
        self.chunk_delay = 0.0
        self.extra_headers = {}
        self.chat_usage = None
        self.delta_usage = None
        self.on_request = None

    def bodies(self, path: str) -> list[Any]:
        return [r.body for r in self.requests if r.path.split("?")[0] == path]

    # -- answering ---------------------------------------------------------------------------

    def _produce(self, maximum: Optional[int]) -> tuple[int, bool]:
        """(output tokens written, stopped at the maximum)."""
        if maximum is not None and maximum >= 0 and self.output_tokens > maximum:
            return maximum, True
        return self.output_tokens, False

    def _answer(self, h: BaseHTTPRequestHandler, path: str, body: dict[str, Any]) -> None:
        if self.delay:
            time.sleep(self.delay)
        with self._lock:
            scripted = self.script.pop(0) if self.script else None
        if scripted == "drop":
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        if scripted is not None:
            status, headers, payload = scripted
            _send_json(h, status, payload, headers)
            return
        if self.refusal is not None:
            status, headers, payload = self.refusal
            _send_json(h, status, payload, headers)
            return
        routes = {
            "/v1/chat/completions": self._openai_chat,
            "/v1/completions": self._openai_completions,
            "/v1/responses": self._openai_responses,
            "/v1/embeddings": self._openai_embeddings,
            "/v1/messages": self._anthropic_messages,
            "/api/chat": self._ollama_chat,
            "/api/generate": self._ollama_generate,
            "/api/embed": self._ollama_embed,
        }
        route = routes.get(path) or fake_gemini.route(self, path)
        if route is None:
            _send_json(h, 404, {"error": f"no route {path}"})
            return
        route(h, body)

    # OpenAI chat completions
    def _openai_chat(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        maximum = body.get("max_completion_tokens", body.get("max_tokens"))
        n, capped = self._produce(maximum)
        finish = "length" if capped else "stop"
        model = body.get("model", "gpt-4o")
        usage = {
            "prompt_tokens": self.input_tokens,
            "completion_tokens": n,
            "total_tokens": self.input_tokens + n,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": min(self.reasoning_tokens, n),
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
        if self.chat_usage is not None:
            usage = self.chat_usage
        base = {"id": "chatcmpl-fake1", "created": int(time.time()), "model": model}
        content = WORD * n
        if (body.get("response_format") or {}).get("type") == "json_schema":
            content = json.dumps({"text": content})
        if not body.get("stream"):
            _send_json(
                h,
                200,
                {
                    **base,
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content, "refusal": None},
                            "logprobs": None,
                            "finish_reason": finish,
                        }
                    ],
                    "usage": usage,
                    "system_fingerprint": "fp_fake",
                },
            )
            return

        def chunk(delta: dict[str, Any], finish_reason: Optional[str]) -> dict[str, Any]:
            return {
                **base,
                "object": "chat.completion.chunk",
                "system_fingerprint": "fp_fake",
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                ],
            }

        events: list[tuple[Optional[str], Any]] = [
            (None, chunk({"role": "assistant", "content": ""}, None))
        ]
        pieces = [WORD] * n
        if pieces and (body.get("response_format") or {}).get("type") == "json_schema":
            pieces[0] = '{"text": "' + pieces[0]  # the answer as JSON, still n words
            pieces[-1] += '"}'
        events += [(None, chunk({"content": piece}, None)) for piece in pieces]
        events.append((None, chunk({}, finish)))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(
                (None, {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
            )
        events.append((None, "[DONE]"))
        self._sse(h, events, content_at=range(1, n + 1))

    # OpenAI legacy completions: one choice per prompt of a prompt list, times n
    def _openai_completions(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        n, capped = self._produce(body.get("max_tokens", 16))
        finish = "length" if capped else "stop"
        prompt = body.get("prompt")
        prompts = (
            len(prompt)
            if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int)
            else 1
        )
        count = prompts * int(body.get("n") or 1)
        usage = {
            "prompt_tokens": self.input_tokens,
            "completion_tokens": n * count,
            "total_tokens": self.input_tokens + n * count,
        }
        base = {
            "id": "cmpl-fake1",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.get("model", "gpt-3.5-turbo-instruct"),
            "system_fingerprint": "fp_fake",
        }

        def choice(i: int, text: str, finish_reason: Optional[str]) -> dict[str, Any]:
            return {"index": i, "text": text, "logprobs": None, "finish_reason": finish_reason}

        if not body.get("stream"):
            choices = [choice(i, WORD * n, finish) for i in range(count)]
            _send_json(h, 200, {**base, "choices": choices, "usage": usage})
            return
        events: list[tuple[Optional[str], Any]] = []
        for i in range(count):
            events += [(None, {**base, "choices": [choice(i, WORD, None)]}) for _ in range(n)]
            events.append((None, {**base, "choices": [choice(i, "", finish)]}))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append((None, {**base, "choices": [], "usage": usage}))
        events.append((None, "[DONE]"))
        content = [i for i, (_, e) in enumerate(events) if isinstance(e, dict) and e["choices"]]
        self._sse(h, events, content_at=[i for i in content if events[i][1]["choices"][0]["text"]])

    # OpenAI responses
    def _openai_responses(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        n, capped = self._produce(body.get("max_output_tokens"))
        model = body.get("model", "gpt-4o")
        text = WORD * n
        message = {
            "type": "message",
            "id": "msg_fake1",
            "status": "incomplete" if capped else "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
        }
        response = {
            "id": "resp_fake1",
            "object": "response",
            "created_at": int(time.time()),
            "status": "incomplete" if capped else "completed",
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if capped else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": model,
            "output": [message],
            "parallel_tool_calls": True,
            "temperature": 1.0,
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "usage": {
                "input_tokens": self.input_tokens,
                "input_tokens_details": {"cached_tokens": self.cached_tokens},
                "output_tokens": n,
                "output_tokens_details": {"reasoning_tokens": min(self.reasoning_tokens, n)},
                "total_tokens": self.input_tokens + n,
            },
        }
        if not body.get("stream"):
            _send_json(h, 200, response)
            return
        pending = {
            **response,
            "status": "in_progress",
            "output": [],
            "usage": None,
            "incomplete_details": None,
        }
        seq = iter(range(10_000))
        events: list[tuple[Optional[str], Any]] = [
            (
                "response.created",
                {"type": "response.created", "response": pending, "sequence_number": next(seq)},
            ),
            (
                "response.in_progress",
                {"type": "response.in_progress", "response": pending, "sequence_number": next(seq)},
            ),
            (
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {**message, "status": "in_progress", "content": []},
                    "sequence_number": next(seq),
                },
            ),
            (  # the SDK's `responses.stream` helper accumulates the deltas into this part
                "response.content_part.added",
                {
                    "type": "response.content_part.added",
                    "item_id": "msg_fake1",
                    "output_index": 0,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []},
                    "sequence_number": next(seq),
                },
            ),
        ]
        first = len(events)
        for _ in range(n):
            events.append(
                (
                    "response.output_text.delta",
                    {
                        "type": "response.output_text.delta",
                        "item_id": "msg_fake1",
                        "output_index": 0,
                        "content_index": 0,
                        "delta": WORD,
                        "logprobs": [],
                        "sequence_number": next(seq),
                    },
                )
            )
        done = "response.incomplete" if capped else "response.completed"
        events.append((done, {"type": done, "response": response, "sequence_number": next(seq)}))
        self._sse(h, events, content_at=range(first, first + n))

    def _openai_embeddings(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        inputs = body.get("input")
        count = (
            len(inputs) if isinstance(inputs, list) and inputs and isinstance(inputs[0], str) else 1
        )
        _send_json(
            h,
            200,
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3]}
                    for i in range(count)
                ],
                "model": body.get("model", "text-embedding-3-small"),
                "usage": {"prompt_tokens": self.input_tokens, "total_tokens": self.input_tokens},
            },
        )

    # Anthropic messages
    def _anthropic_messages(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        n, capped = self._produce(body.get("max_tokens"))
        stop = "max_tokens" if capped else "end_turn"
        model = body.get("model", "claude-haiku-4-5")
        # With thinking on, the first `reasoning_tokens` output tokens are thinking.
        thinking = (body.get("thinking") or {}).get("type") == "enabled"
        r = min(self.reasoning_tokens, n) if thinking else 0
        usage = {
            "input_tokens": self.input_tokens - self.cached_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": self.cached_tokens,
            "output_tokens": n,
            "service_tier": "standard",
        }
        blocks: list[dict[str, Any]] = []
        if r:
            blocks.append({"type": "thinking", "thinking": THINK * r, "signature": "sig"})
        blocks.append({"type": "text", "text": WORD * (n - r)})
        message = {
            "id": "msg_fake1",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            _send_json(h, 200, message)
            return
        start = {**message, "content": [], "stop_reason": None}
        start["usage"] = {**usage, "output_tokens": 1}
        events: list[tuple[Optional[str], Any]] = [
            ("message_start", {"type": "message_start", "message": start}),
            ("ping", {"type": "ping"}),
        ]
        content_at: list[int] = []
        for index, block in enumerate(blocks):
            kind = block["type"]
            empty = {
                "type": kind,
                kind: "",
                **({"signature": ""} if r and kind == "thinking" else {}),
            }
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": empty},
                )
            )
            count, piece = (r, THINK) if kind == "thinking" else (n - r, WORD)
            delta_type = "thinking_delta" if kind == "thinking" else "text_delta"
            for _ in range(count):
                if kind == "text":
                    content_at.append(len(events))
                delta = {"type": delta_type, kind: piece}
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                    )
                )
            if kind == "thinking":
                sig = {"type": "signature_delta", "signature": "sig"}
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": sig},
                    )
                )
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events += [
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": n, **(self.delta_usage or {})},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        self._sse(h, events, content_at=content_at)

    # Ollama
    def _ollama_final(self, body: dict[str, Any], n: int, capped: bool) -> dict[str, Any]:
        return {
            "model": body.get("model", "llama3.2"),
            "created_at": "2026-11-30T12:00:00.000000Z",
            "done": True,
            "done_reason": "length" if capped else "stop",
            "total_duration": 5_000_000,
            "load_duration": 1_000_000,
            "prompt_eval_count": self.input_tokens,
            "prompt_eval_duration": 1_000_000,
            "eval_count": n,
            "eval_duration": 3_000_000,
        }

    def _ollama(self, h: BaseHTTPRequestHandler, body: dict[str, Any], chat: bool) -> None:
        n, capped = self._produce((body.get("options") or {}).get("num_predict"))
        final = self._ollama_final(body, n, capped)
        # With `think` on, the first `reasoning_tokens` output tokens are thinking.
        r = min(self.reasoning_tokens, n) if body.get("think") else 0

        def part(text: str, thinking: str = "") -> dict[str, Any]:
            extra = {"thinking": thinking} if thinking else {}
            if chat:
                return {"message": {"role": "assistant", "content": text, **extra}}
            return {"response": text, **extra}

        if body.get("stream", True) is False:
            _send_json(h, 200, {**final, **part(WORD * (n - r), THINK * r)})
            return
        head = {"model": final["model"], "created_at": final["created_at"], "done": False}
        lines = [{**head, **part("", THINK)} for _ in range(r)]
        lines += [{**head, **part(WORD)} for _ in range(n - r)]
        lines.append({**final, **part("")})
        self._ndjson(h, lines)

    def _ollama_chat(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        self._ollama(h, body, chat=True)

    def _ollama_generate(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        self._ollama(h, body, chat=False)

    def _ollama_embed(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        inputs = body.get("input")
        count = len(inputs) if isinstance(inputs, list) else 1
        _send_json(
            h,
            200,
            {
                "model": body.get("model", "nomic-embed-text"),
                "embeddings": [[0.1, 0.2, 0.3] for _ in range(count)],
                "total_duration": 1_000_000,
                "load_duration": 100_000,
                "prompt_eval_count": self.input_tokens,
            },
        )

    # -- wire formats ------------------------------------------------------------------------

    def _stream(
        self, h: BaseHTTPRequestHandler, content_type: str, pieces: list[bytes], content_at: Any
    ) -> None:
        h.send_response(200)
        h.send_header("content-type", content_type)
        h.send_header("transfer-encoding", "chunked")
        h.send_header("cache-control", "no-cache")
        h.end_headers()
        sent = 0
        for i, piece in enumerate(pieces):
            if self.break_after is not None and i in content_at and sent >= self.break_after:
                # Drop the connection mid-body: the client sees an incomplete chunked read.
                h.wfile.flush()
                h.close_connection = True
                return
            h.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            h.wfile.flush()
            if self.chunk_delay:
                time.sleep(self.chunk_delay)
            if i in content_at:
                sent += 1
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def _sse(
        self, h: BaseHTTPRequestHandler, events: list[tuple[Optional[str], Any]], content_at: Any
    ) -> None:
        pieces = []
        for name, data in events:
            payload = data if isinstance(data, str) else json.dumps(data)
            head = f"event: {name}\n" if name else ""
            pieces.append(f"{head}data: {payload}\n\n".encode())
        self._stream(h, "text/event-stream; charset=utf-8", pieces, content_at)

    def _ndjson(self, h: BaseHTTPRequestHandler, lines: list[dict[str, Any]]) -> None:
        pieces = [(json.dumps(line) + "\n").encode() for line in lines]
        self._stream(h, "application/x-ndjson", pieces, range(len(lines) - 1))


def _send_json(
    h: BaseHTTPRequestHandler, status: int, payload: Any, headers: Optional[dict[str, str]] = None
) -> None:
    data = json.dumps(payload).encode()
    h.send_response(status)
    sent = {k.lower() for k in (headers or {})}
    for k, v in (headers or {}).items():
        if k.lower() != "content-length":
            h.send_header(k, v)
    if "content-type" not in sent:
        h.send_header("content-type", "application/json")
    h.send_header("content-length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)
    h.wfile.flush()
