"""Big answers and streams cost linear time and bounded memory (issue 30, item 7): one event
of megabytes is relayed whole; an event or an answer past its bound ends the call with an
error in the provider's shape, billed, its hold released; an Ollama stream whose line never
ends is cut and leaves no hold, whether or not its client stayed; and huge prompts are
counted off the serving thread, so /healthz answers meanwhile. The upstreams are raw
sockets (tests_py/raw_upstream.py): no SDK-shaped server sends these."""

from __future__ import annotations

import json
import random
import socket
import string
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import ollama
import openai
import pytest
import usage_guard as ug
from fake_provider import WORD
from provider_support import policy, prompt_tokens, settled, used
from raw_upstream import RawUpstream, chunk, head, sse, usage_chunk
from test_gateway import ALICE, MESSAGES, gateway_policy

KIB = 1024


def start(upstream_url: str, **bounds: Any) -> tuple[ug.Guard, ug.Gateway]:
    document = policy()
    document["providers"] = {p: {"base_url": upstream_url} for p in ("openai", "ollama")}
    document["gateway"] = {"keys": {"alice": {"key": ALICE, "principal": "alice"}}, **bounds}
    guard = ug.Guard(ug.Policy.from_dict(document))
    return guard, ug.Gateway(guard, "127.0.0.1:0")


@pytest.fixture
def stop_after() -> Iterator[list[ug.Gateway]]:
    running: list[ug.Gateway] = []
    yield running
    for g in running:
        g.shutdown()
        assert g.wait(10)


def oai(gateway: ug.Gateway, timeout: float = 20) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{gateway.url}/v1", api_key=ALICE, max_retries=0, timeout=timeout
    )


def test_one_event_of_8_mb_is_relayed_whole(stop_after):
    words = 8 * 1024 * KIB // len(WORD)
    text = WORD * words  # one token a word

    def answer(conn: socket.socket, body: Any, stop: threading.Event) -> None:
        conn.sendall(head("text/event-stream"))
        conn.sendall(sse(chunk(text)) + sse(usage_chunk(9, words)) + b"data: [DONE]\n\n")

    with RawUpstream(answer) as upstream:
        guard, gateway = start(upstream.url)
        stop_after.append(gateway)
        got = "".join(
            c.choices[0].delta.content or ""
            for c in oai(gateway).chat.completions.create(
                model="gpt-4o", messages=MESSAGES, stream=True
            )
            if c.choices
        )
        assert got == text
        assert settled(guard, "gpt-4o")
        assert used(guard, "alice", "gpt-4o") == 9 + words


def test_an_event_past_the_bound_ends_the_stream_with_an_error_event_billed(stop_after):
    def answer(conn: socket.socket, body: Any, stop: threading.Event) -> None:
        conn.sendall(head("text/event-stream"))
        conn.sendall(b"".join(sse(chunk(" hello")) for _ in range(3)))
        conn.sendall(sse(chunk("b" * (100 * KIB))) + sse(usage_chunk(9, 1000)))
        stop.wait(10)

    with RawUpstream(answer) as upstream:
        guard, gateway = start(upstream.url, max_event_bytes=64 * KIB)
        stop_after.append(gateway)
        got = []
        with pytest.raises(openai.APIError) as e:
            for c in oai(gateway).chat.completions.create(
                model="gpt-4o", messages=MESSAGES, stream=True
            ):
                got.append(c.choices[0].delta.content)
        assert not isinstance(e.value, openai.APIConnectionError)
        assert e.value.code == "event_too_large"
        assert "gateway.max_event_bytes" in e.value.message
        assert got == [" hello"] * 3
        assert settled(guard, "gpt-4o")
        sent = upstream.bodies[0]
        assert used(guard, "alice", "gpt-4o") == prompt_tokens(sent, "openai", "gpt-4o") + 3


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "until-close"])
def test_an_answer_past_the_bound_is_a_502_billed_and_released(stop_after, declared):
    reply = {
        "id": "chatcmpl-raw",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "c" * 200_000}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16},
    }
    raw = json.dumps(reply).encode()

    def answer(conn: socket.socket, body: Any, stop: threading.Event) -> None:
        conn.sendall(head("application/json", len(raw) if declared else None) + raw)

    with RawUpstream(answer) as upstream:
        guard, gateway = start(upstream.url, max_answer_bytes=64 * KIB)
        stop_after.append(gateway)
        with pytest.raises(openai.APIStatusError) as e:
            oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=40)
        assert e.value.status_code == 502
        assert e.value.response.json()["error"]["code"] == "answer_too_large"
        assert settled(guard, "gpt-4o")
        # Billed as the prompt and the output maximum the call was sent with.
        sent = upstream.bodies[0]
        assert used(guard, "alice", "gpt-4o") == prompt_tokens(sent, "openai", "gpt-4o") + 40


def endless_line(conn: socket.socket, body: Any, stop: threading.Event) -> None:
    """An Ollama stream whose first line never ends: 1 MB of it, then nothing more."""
    conn.sendall(head("application/x-ndjson"))
    conn.sendall(b'{"model": "llama3.2", "message": {"role": "assistant", "content": "')
    for _ in range(64):
        conn.sendall(b"a" * (16 * KIB))
    stop.wait(20)


def test_an_ollama_line_that_never_ends_is_cut_with_an_error_line(stop_after):
    with RawUpstream(endless_line) as upstream:
        guard, gateway = start(upstream.url, max_event_bytes=64 * KIB)
        stop_after.append(gateway)
        local = ollama.Client(
            host=gateway.url, headers={"authorization": f"Bearer {ALICE}"}, timeout=5
        )
        with pytest.raises(ollama.ResponseError) as e:
            for _ in local.chat(model="llama3.2", messages=MESSAGES, stream=True):
                pass
        assert "gateway.max_event_bytes" in str(e.value)
        assert settled(guard, "llama3.2")
        sent = upstream.bodies[0]
        assert used(guard, "alice", "llama3.2") == prompt_tokens(sent, "ollama", "llama3.2")


def test_an_ollama_line_that_never_ends_leaves_no_hold_after_its_client_left(stop_after):
    """The client reads the answer's head and hangs up: the call is billed and its hold
    released (the server notices the close, or the line is cut at the bound, whichever
    comes first; the test above is the one the bound makes pass)."""
    with RawUpstream(endless_line) as upstream:
        guard, gateway = start(upstream.url, max_event_bytes=64 * KIB)
        stop_after.append(gateway)
        body = json.dumps({"model": "llama3.2", "messages": MESSAGES}).encode()
        sock = socket.create_connection((gateway.host, gateway.port))
        sock.sendall(
            b"POST /api/chat HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            + f"Authorization: Bearer {ALICE}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        sock.close()
        assert settled(guard, "llama3.2")
        assert used(guard, "alice", "llama3.2") > 0


def letters(n: int, seed: int) -> str:
    """Random letters: one pre-token of n bytes, slow to count (seconds for megabytes)."""
    table = (string.ascii_letters * 5)[:256].encode()
    return random.Random(seed).randbytes(n).translate(table).decode()


def test_healthz_answers_while_two_huge_prompts_are_counted(fake):
    """One serving thread; two callers send prompts that take a second or more to count.
    Once both counts have begun, /healthz is answered while they run."""
    document = gateway_policy(fake)
    document["gateway"]["threads"] = 1
    guard = ug.Guard(ug.Policy.from_dict(document))
    gateway = ug.Gateway(guard, "127.0.0.1:0")
    done: list[int] = []
    bodies = {
        seed: {
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": letters(4 * 1024 * KIB, seed)}],
            "max_tokens": 5,
        }
        for seed in (1, 2)
    }

    def big(seed: int) -> None:
        r = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json=bodies[seed],
            headers={"authorization": f"Bearer {ALICE}"},
            timeout=60,
        )
        # Counted whole, then refused: far past gpt-4o's context window.
        assert r.json()["error"]["code"] == "context_length_exceeded", r.text
        done.append(seed)

    callers = [threading.Thread(target=big, args=(seed,)) for seed in (1, 2)]
    counts = ug._core._prompt_counts()
    try:
        for c in callers:
            c.start()
        # Both counts have begun (on the serving thread before the fix, the second only
        # once the first was done).
        deadline = time.monotonic() + 30
        while ug._core._prompt_counts() < counts + 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert ug._core._prompt_counts() >= counts + 2
        assert httpx.get(f"{gateway.url}/healthz", timeout=1.0).status_code == 200
        assert len(done) < 2  # a count was still running
        for c in callers:
            c.join(60)
        assert sorted(done) == [1, 2]
    finally:
        for c in callers:
            c.join(60)
        gateway.shutdown()
        assert gateway.wait(10)


def test_a_client_leaving_at_finish_reason_is_billed_the_reported_reasoning(fake):
    """A reasoning model's stream: 20 visible tokens, then the usage chunk (after the
    finish_reason chunk) reports 2,020 output tokens, 2,000 of them reasoning never streamed
    as text. A client that hangs up as soon as finish_reason arrives has the whole answer:
    the gateway reads the upstream on to its usage event and bills what it reports, as for a
    client reading to [DONE]."""
    guard = ug.Guard(ug.Policy.from_dict(gateway_policy(fake)))
    gateway = ug.Gateway(guard, "127.0.0.1:0")
    fake.chunk_delay, fake.output_tokens = 0.02, 20
    fake.chat_usage = {
        "prompt_tokens": 21,
        "completion_tokens": 2020,
        "total_tokens": 2041,
        "completion_tokens_details": {"reasoning_tokens": 2000},
    }
    body = json.dumps(
        {"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 4000, "stream": True}
    ).encode()
    request = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Authorization: Bearer {ALICE}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    try:
        for leave_at in (b"[DONE]", b'"finish_reason": "stop"'):
            before = used(guard, "alice", "gpt-4o")
            sock = socket.create_connection((gateway.host, gateway.port))
            sock.sendall(request)
            sock.settimeout(10)
            got = b""
            while leave_at not in got:
                piece = sock.recv(65536)
                assert piece, got[-300:]
                got += piece
            sock.close()
            assert settled(guard, "gpt-4o")
            assert used(guard, "alice", "gpt-4o") - before == 2041, leave_at
    finally:
        gateway.shutdown()
        assert gateway.wait(10)
