"""An upstream that misbehaves on purpose: a loopback HTTP server whose every answer is
written byte for byte by a function of the test (one event of megabytes, a line that never
ends, an answer larger than any bound, then hanging). Requests are read whole first."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any, Callable

Answer = Callable[[socket.socket, Any, threading.Event], None]


class RawUpstream:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.bodies: list[Any] = []
        self.stopping = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> RawUpstream:
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._server.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(body) < length:
                body += conn.recv(65536)
            parsed = json.loads(body) if body else None
            self.bodies.append(parsed)
            try:
                self.answer(conn, parsed, self.stopping)
            except OSError:
                pass


def head(content_type: str, length: int | None = None) -> bytes:
    """A 200 answer's status line and headers: with a length, or closed to end it."""
    framing = f"Content-Length: {length}" if length is not None else "Connection: close"
    return f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n{framing}\r\n\r\n".encode()


def sse(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def chunk(text: str) -> dict[str, Any]:
    """An OpenAI chat completion chunk carrying `text`."""
    return {
        "id": "chatcmpl-raw",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }


def usage_chunk(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-raw",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "gpt-4o",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
