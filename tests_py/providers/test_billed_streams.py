"""A stream is billed what it delivered, through the library's adapters as through the gateway:
the reasoning an OpenAI-compatible server streams (`reasoning_content`) counts when the stream
is cut off before its usage chunk; a report below the text streamed is raised to the count of
that text; Anthropic's message_delta leaving out the cache reads keeps message_start's. A call
whose output admission cannot bound (Predicted Outputs) is refused before it is sent."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any

import openai
import usage_guard as ug
from fake_provider import WORD, FakeProvider
from provider_support import policy, prompt_tokens, reserved, used
from raw_upstream import RawUpstream
from usage_guard.openai import GuardedOpenAI

GPT = "gpt-4o"
MESSAGES = [{"role": "user", "content": "Think, then say hello."}]


def chunk(delta: dict[str, Any], usage: Any = None) -> bytes:
    body: dict[str, Any] = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": GPT,
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}] if delta else [],
    }
    if usage is not None:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def sse(conn: socket.socket, events: list[bytes]) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    conn.sendall(head + b"".join(events) + b"data: [DONE]\n\n")


def guarded(url: str, guard: ug.Guard) -> GuardedOpenAI:
    sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
    return GuardedOpenAI(sdk, guard, user="alice")


def test_reasoning_streamed_before_a_cut_is_billed() -> None:
    # 300 words of reasoning, then the caller stops reading: before, the reasoning was not
    # counted, so the call was billed its prompt and no output at all.
    reasoning = [chunk({"reasoning_content": WORD * 10}) for _ in range(30)]

    def answer(conn: socket.socket, request: Any, stop: threading.Event) -> None:
        sse(conn, [chunk({"role": "assistant"}), *reasoning, chunk({"content": "Hi"})])

    guard = ug.Guard(ug.Policy.from_dict(policy()))
    with RawUpstream(answer) as upstream:
        stream = guarded(upstream.url, guard).chat.completions.create(
            model=GPT, messages=MESSAGES, stream=True
        )
        for i, _ in enumerate(stream):
            if i == 30:  # the role chunk and the 30 of reasoning
                break
        stream.close()
    billed = stream.usage_billed  # type: ignore[attr-defined]
    assert billed["output_tokens"] >= 300 and billed["reasoning_tokens"] >= 300
    assert used(guard, "alice", GPT) == billed["input_tokens"] + billed["output_tokens"]


def test_a_report_below_the_text_streamed_is_raised_to_its_count() -> None:
    usage = {"prompt_tokens": 21, "completion_tokens": 1, "total_tokens": 22}

    def answer(conn: socket.socket, request: Any, stop: threading.Event) -> None:
        words = [chunk({"content": WORD * 10}) for _ in range(20)]
        sse(conn, [chunk({"role": "assistant"}), *words, chunk({}, usage)])

    guard = ug.Guard(ug.Policy.from_dict(policy()))
    with RawUpstream(answer) as upstream:
        stream = guarded(upstream.url, guard).chat.completions.create(
            model=GPT, messages=MESSAGES, stream=True
        )
        assert sum(1 for _ in stream) == 21  # the usage chunk the guard asked for is not shown
    assert used(guard, "alice", GPT) >= 21 + 200 and reserved(guard, "alice", GPT) == 0


def test_anthropic_cache_reads_stand_when_the_delta_leaves_them_out(
    fake: FakeProvider, make_guard: Any
) -> None:
    import anthropic
    from usage_guard.anthropic import GuardedAnthropic

    model = "claude-haiku-4-5"
    fake.input_tokens, fake.cached_tokens = 10_000, 9_900
    fake.delta_usage = {"input_tokens": 100}  # the delta's input, no cache fields
    guard = make_guard(policy())
    sdk = anthropic.Anthropic(base_url=fake.url, api_key="k", max_retries=0)
    client = GuardedAnthropic(sdk, guard, user="alice")
    stream = client.messages.create(model=model, max_tokens=100, messages=MESSAGES, stream=True)
    for _ in stream:
        pass
    billed = stream.usage_billed  # type: ignore[attr-defined]
    assert billed["cached_input_tokens"] == 9_900 and billed["input_tokens"] >= 9_900
    assert prompt_tokens({"model": model, "messages": MESSAGES}, "anthropic", model) < 100


def test_a_prediction_is_refused_before_anything_is_sent(
    fake: FakeProvider, make_guard: Any
) -> None:
    # Its rejected tokens are billed as output past the output maximum: four calls billed
    # 80,132 tokens on a 5,000-a-day limit.
    client = guarded(fake.url, make_guard(policy()))
    prediction = {"type": "content", "content": WORD * 2000}
    try:
        client.chat.completions.create(model=GPT, messages=MESSAGES, prediction=prediction)
    except ValueError as e:
        assert "request.prediction: " in str(e) and "not accepted on a metered call" in str(e)
    else:
        raise AssertionError("a call with a prediction was sent")
    assert fake.requests == []
    # Refused at admission, also with the prompt counted by the caller (the counter, which
    # is skipped then, is not where it is checked); counting it alone still answers.
    guard = make_guard(policy())
    body = {"model": GPT, "messages": MESSAGES, "prediction": prediction}
    try:
        guard.admit("alice", GPT, body, prompt_tokens=10, provider="openai")
    except ValueError as e:
        assert "request.prediction: " in str(e)
    else:
        raise AssertionError("admitted with a prediction")
    assert ug.count_prompt(body, "openai", GPT)["tokens"] > 0


def anthropic_sse(conn: socket.socket, arguments: str, output_tokens: int) -> None:
    def event(kind: str, body: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps(body)}\n\n".encode()

    usage = {"input_tokens": 20, "output_tokens": 1}
    message = {"id": "m", "type": "message", "role": "assistant", "model": "claude-haiku-4-5"}
    block = {"type": "tool_use", "id": "t", "name": "note", "input": {}}
    delta = {"type": "input_json_delta", "partial_json": arguments}
    events = [
        event(
            "message_start",
            {
                "type": "message_start",
                "message": {**message, "content": [], "stop_reason": None, "usage": usage},
            },
        ),
        event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
        event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": output_tokens},
            },
        ),
        event("message_stop", {"type": "message_stop"}),
    ]
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    conn.sendall(head + b"".join(events))


def test_a_tool_call_in_another_script_is_billed_as_reported() -> None:
    # messages.stream(...) counted a tool call's arguments as json.dumps wrote them again,
    # each Cyrillic letter a \\u escape: 820 letters reported as 400 tokens were billed 2,145.
    import anthropic
    from usage_guard.anthropic import GuardedAnthropic

    arguments = json.dumps({"text": "привет мир " * 75}, ensure_ascii=False)

    def answer(conn: socket.socket, request: Any, stop: threading.Event) -> None:
        anthropic_sse(conn, arguments, 400)

    guard = ug.Guard(ug.Policy.from_dict(policy()))
    with RawUpstream(answer) as upstream:
        sdk = anthropic.Anthropic(base_url=upstream.url, api_key="k", max_retries=0)
        client = GuardedAnthropic(sdk, guard, user="alice")
        with client.messages.stream(
            model="claude-haiku-4-5", max_tokens=1000, messages=MESSAGES
        ) as stream:
            stream.get_final_message()
    assert stream.usage_billed["output_tokens"] == 400  # type: ignore[attr-defined]


def test_an_echoed_prompt_is_not_billed_again_as_output() -> None:
    # Legacy completions with `echo`: the text streamed begins with the prompt, which the
    # report leaves out of the output; counting it would bill the prompt twice.
    prompt = WORD * 100
    usage = {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}

    def piece(text: str, usage: Any = None) -> bytes:
        body: dict[str, Any] = {
            "id": "c",
            "object": "text_completion",
            "created": 0,
            "model": "gpt-3.5-turbo-instruct",
            "choices": [{"index": 0, "text": text, "finish_reason": None}],
        }
        if usage is not None:
            body.update(choices=[], usage=usage)
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    def answer(conn: socket.socket, request: Any, stop: threading.Event) -> None:
        sse(conn, [piece(prompt), piece(WORD * 5), piece("", usage)])

    guard = ug.Guard(ug.Policy.from_dict(policy()))
    with RawUpstream(answer) as upstream:
        stream = guarded(upstream.url, guard).completions.create(
            model=GPT, prompt=prompt, echo=True, stream=True
        )
        for _ in stream:
            pass
    assert stream.usage_billed["output_tokens"] == 5  # type: ignore[attr-defined]
