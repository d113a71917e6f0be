"""Every call the provider served is billed, through the gateway and the library's adapters
alike (one reading of provider usage, in the core): reasoning above the output, counts over
2^53, negative or non-integer counts are held to what can be billed (logged) and billed, never
a bill refused and the ticket released; a plain answer with missing, malformed or negative
usage is billed the prompt as counted plus its output text counted (an answer that is not
readable JSON, the prompt and the output maximum it was sent with); a call the upstream timed
out on after receiving it (504) is billed the prompt and counted in a metric."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import usage_guard as ug
from fake_provider import WORD, FakeProvider, Recorded
from provider_support import policy, prompt_tokens, reserved, settled, used
from raw_upstream import RawUpstream
from usage_guard.openai import GuardedOpenAI

ALICE = "sk-alice-billed"
MESSAGES = [{"role": "user", "content": "Say hello a few times."}]
CHAT = {"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 50}
MAX = 2**53
OUT = 7  # the scripted answers' output: seven tokens of text


def chat_answer(usage: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "id": "chatcmpl-odd",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": WORD * OUT},
                "finish_reason": "stop",
            }
        ],
    }
    if usage is not None:
        answer["usage"] = usage
    return answer


def prompt() -> int:
    return prompt_tokens({"model": "gpt-4o", "messages": MESSAGES}, "openai", "gpt-4o")


# (name, the usage reported, (input, output) billed); None: counted (the prompt, the text).
ODD = [
    (
        "reasoning above the output",
        {
            "prompt_tokens": 21,
            "completion_tokens": 5,
            "completion_tokens_details": {"reasoning_tokens": 9},
        },
        (21, 5),
    ),
    ("input over 2^53", {"prompt_tokens": 2**60, "completion_tokens": 5}, (MAX, 5)),
    ("output over 2^53 as a float", {"prompt_tokens": 21, "completion_tokens": 1e30}, (21, MAX)),
    ("no usage", None, None),
    ("usage not an object", "lots", None),
    ("negative counts", {"prompt_tokens": -1, "completion_tokens": -5}, None),
    ("non-integer counts", {"prompt_tokens": 20.5, "completion_tokens": "7"}, None),
    ("a negative output only", {"prompt_tokens": 21, "completion_tokens": -3}, (21, None)),
]
IDS = [case[0] for case in ODD]


def expected(billed: Any) -> tuple[int, int]:
    if billed is None:
        return prompt(), OUT
    inp, out = billed
    return inp, OUT if out is None else out


@pytest.fixture
def start(fake: FakeProvider) -> Iterator[Any]:
    running: list[ug.Gateway] = []

    def make(**gateway: Any) -> tuple[ug.Guard, ug.Gateway]:
        doc = metered(policy(users=("alice",)))
        doc["providers"] = {"openai": {"base_url": fake.url}}
        doc["gateway"] = {"keys": {"alice": {"key": ALICE, "principal": "alice"}}, **gateway}
        guard = ug.Guard(ug.Policy.from_dict(doc))
        running.append(ug.Gateway(guard, "127.0.0.1:0"))
        return guard, running[-1]

    yield make
    for g in running:
        g.shutdown()
        assert g.wait(10)


def billed_tokens(guard: ug.Guard) -> tuple[int, int]:
    return used(guard, "alice", "gpt-4o", "input_tokens"), used(
        guard, "alice", "gpt-4o", "output_tokens"
    )


def metered(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with input and output tokens metered apart, to read what each bill recorded."""
    for limit in doc["limits"]["direct"]:
        limit["rules"] = limit["rules"] + [
            {"metric": "input_tokens", "amount": MAX, "window": "day"},
            {"metric": "output_tokens", "amount": MAX, "window": "day"},
        ]
    return doc


@pytest.mark.parametrize("name,usage,billed", ODD, ids=IDS)
def test_the_gateway_bills_whatever_usage_the_provider_reports(
    fake, start, name, usage, billed, caplog
):
    caplog.set_level("WARNING", logger="usage_guard")
    guard, gateway = start()
    fake.script = [(200, {}, chat_answer(usage))]
    reply = openai.OpenAI(
        base_url=f"{gateway.url}/v1", api_key=ALICE, max_retries=0
    ).chat.completions.create(**CHAT)
    assert reply.choices[0].message.content == WORD * OUT
    assert reserved(guard, "alice", "gpt-4o") == 0
    assert billed_tokens(guard) == expected(billed)
    assert any("usage" in r.getMessage() for r in caplog.records), "the oddity is logged"


@pytest.mark.parametrize("name,usage,billed", ODD, ids=IDS)
def test_the_library_adapter_bills_whatever_usage_the_provider_reports(
    fake, make_guard, name, usage, billed
):
    guard = make_guard(metered(policy(users=("alice",))))
    sdk = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk-test", max_retries=0)
    fake.script = [(200, {}, chat_answer(usage))]
    client = GuardedOpenAI(sdk, guard, user="alice")
    reply = client.chat.completions.create(**CHAT)
    assert reply.choices[0].message.content == WORD * OUT
    assert reserved(guard, "alice", "gpt-4o") == 0
    assert billed_tokens(guard) == expected(billed)


def test_a_stream_with_unreadable_usage_is_billed_what_it_delivered(fake, start):
    guard, gateway = start()
    fake.chat_usage = {"prompt_tokens": -1, "completion_tokens": "many"}
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=ALICE, max_retries=0)
    text = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(**CHAT, stream=True)
        if c.choices
    )
    assert text == WORD * 12
    assert settled(guard, "gpt-4o"), "billed after the stream's last event"
    assert used(guard, "alice", "gpt-4o") == prompt() + 12


def test_a_call_the_upstream_timed_out_on_is_billed_its_prompt_and_counted(fake, start):
    guard, gateway = start(upstream_timeout_seconds=1)

    def slow(request: Recorded) -> None:
        time.sleep(1.5)

    fake.on_request = slow
    r = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json=CHAT,
        headers={"authorization": f"Bearer {ALICE}"},
        timeout=30,
    )
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "upstream_timeout"
    assert "upstream_timeout_seconds" in r.json()["error"]["message"]
    assert used(guard, "alice", "gpt-4o") == prompt()
    assert reserved(guard, "alice", "gpt-4o") == 0
    line = 'usage_guard_gateway_upstream_timeouts_total{provider="openai",stage="total"} 1'
    assert line in gateway.metrics()


@pytest.mark.parametrize("encoding", ["gzip", None], ids=["compressed", "not-json"])
def test_an_answer_that_cannot_be_read_is_billed_as_sent(encoding):
    """A 200 whose body the gateway cannot read (compressed, or not JSON at all) was still
    served: billed the prompt and the output maximum it was sent with, never the prompt
    alone."""
    text = json.dumps(chat_answer({"prompt_tokens": 21, "completion_tokens": OUT})).encode()
    body = gzip.compress(text) if encoding else b"<html>" + text
    extra = f"Content-Encoding: {encoding}\r\n" if encoding else ""

    def answer(conn: socket.socket, request: Any, stop: threading.Event) -> None:
        conn.sendall(
            f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    with RawUpstream(answer) as upstream:
        doc = metered(policy(users=("alice",)))
        doc["providers"] = {"openai": {"base_url": upstream.url}}
        doc["gateway"] = {"keys": {"alice": {"key": ALICE, "principal": "alice"}}}
        guard = ug.Guard(ug.Policy.from_dict(doc))
        gateway = ug.Gateway(guard, "127.0.0.1:0")
        try:
            r = httpx.post(
                f"{gateway.url}/v1/chat/completions",
                json=CHAT,
                headers={"authorization": f"Bearer {ALICE}"},
                timeout=30,
            )
            assert r.status_code == 200
            assert upstream.bodies[0]["max_tokens"] == 50
            assert billed_tokens(guard) == (prompt(), 50)
            assert reserved(guard, "alice", "gpt-4o") == 0
        finally:
            gateway.shutdown()
            assert gateway.wait(10)
