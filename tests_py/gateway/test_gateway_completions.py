"""`POST /v1/completions` (OpenAI's legacy completions) through the gateway, with the real
`openai` SDK: admitted with the prompt counted as sent (a string, strings, token ids),
`max_tokens` fitted (16, the API's default, when absent), forwarded byte-for-byte, streamed
with the usage the gateway asks for, billed from it; refusals and bad shapes before the
provider sees the call."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import usage_guard as ug
from fake_provider import WORD, FakeProvider
from provider_support import reserved, room, used
from test_gateway import ALICE, gateway_policy, oai, stream_then_hang_up

MODEL = "gpt-3.5-turbo-instruct"
PROMPT = "Say hello a few times."


@pytest.fixture
def start(fake: FakeProvider) -> Iterator[Any]:
    """`start(tokens_a_day)` → (guard, gateway) with alice's Direct Limit on the instruct
    model; stopped after the test."""
    running: list[ug.Gateway] = []

    def make(tokens_a_day: int = 1_000_000) -> tuple[ug.Guard, ug.Gateway]:
        document = gateway_policy(fake)
        document["models"][MODEL] = {"provider": "openai", "max_output_tokens": 4096}
        rules = [{"metric": "tokens", "amount": tokens_a_day, "window": "day"}]
        document["limits"]["direct"].append({"user": "alice", "model": MODEL, "rules": rules})
        guard = ug.Guard(ug.Policy.from_dict(document))
        gateway = ug.Gateway(guard, "127.0.0.1:0")
        running.append(gateway)
        return guard, gateway

    yield make
    for g in running:
        g.shutdown()
        assert g.wait(10)


def test_plain_is_forwarded_as_sent_and_billed_from_its_usage(fake, start):
    guard, gateway = start()
    reply = oai(gateway).completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=100, extra_body={"x_unknown": [1]}
    )
    assert reply.choices[0].text == WORD * 12
    assert used(guard, "alice", MODEL) == 21 + 12
    assert reserved(guard, "alice", MODEL) == 0
    sent = fake.bodies("/v1/completions")
    assert sent == [{"model": MODEL, "prompt": PROMPT, "max_tokens": 100, "x_unknown": [1]}]


def test_without_max_tokens_the_default_16_is_reserved_and_left_to_the_provider(fake, start):
    fake.output_tokens = 40
    guard, gateway = start()
    reply = oai(gateway).completions.create(model=MODEL, prompt=PROMPT)
    assert reply.choices[0].text == WORD * 16 and reply.choices[0].finish_reason == "length"
    assert "max_tokens" not in fake.bodies("/v1/completions")[0]
    assert used(guard, "alice", MODEL) == 21 + 16


def test_streamed_asks_for_the_usage_keeps_it_back_and_bills_it(fake, start):
    guard, gateway = start()
    chunks = list(
        oai(gateway).completions.create(model=MODEL, prompt=PROMPT, max_tokens=50, stream=True)
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == WORD * 12
    assert fake.bodies("/v1/completions")[0]["stream_options"] == {"include_usage": True}
    assert all(c.choices for c in chunks)
    # The gateway bills when the upstream's stream ends, which may land just after the
    # client read its last event.
    for _ in range(100):
        if reserved(guard, "alice", MODEL) == 0:
            break
        time.sleep(0.02)
    assert used(guard, "alice", MODEL) == 21 + 12
    asked = list(
        oai(gateway).completions.create(
            model=MODEL,
            prompt=PROMPT,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert asked[-1].usage is not None and asked[-1].usage.completion_tokens == 12


def test_client_gone_mid_stream_is_billed_the_usage_the_provider_reports(fake, start):
    """The client hangs up after 5 of 60 words: the upstream is read on to its usage event
    (asked for by the gateway) and that is billed."""
    guard, gateway = start()
    fake.output_tokens, fake.chunk_delay = 60, 0.03
    request = {"model": MODEL, "prompt": PROMPT, "max_tokens": 100, "stream": True}
    stream_then_hang_up(gateway.url, "/v1/completions", request, words=5)
    for _ in range(500):  # the rest of the stream comes in some 1.7 s
        if reserved(guard, "alice", MODEL) == 0:
            break
        time.sleep(0.02)
    assert used(guard, "alice", MODEL) == fake.input_tokens + 60
    assert reserved(guard, "alice", MODEL) == 0


def test_refused_before_the_provider(fake, start):
    guard, gateway = start(tokens_a_day=5)
    with pytest.raises(openai.RateLimitError) as e:
        oai(gateway).completions.create(model=MODEL, prompt=PROMPT, max_tokens=10)
    assert e.value.response.json()["error"]["code"] == "usage_limit_reached"
    assert e.value.response.headers["x-ratelimit-limit-tokens"] == "5"
    assert fake.requests == []
    assert reserved(guard, "alice", MODEL) == 0


def test_fitted_and_shared_among_prompts_and_n(fake, start):
    request = {"model": MODEL, "prompt": PROMPT, "max_tokens": 1000}
    guard, gateway = start(tokens_a_day=400)
    raw = oai(gateway).completions.with_raw_response.create(**request)
    fitted = room(400, request, "openai.completions", MODEL)
    assert fake.bodies("/v1/completions")[0]["max_tokens"] == fitted < 400
    assert "max_output_tokens=" in raw.headers["x-usage-restriction"]
    # two prompts × n=2: four answers, each may write the caller's maximum; 4 × 1,000 does
    # not fit in what is left, so what is left is shared among them (as chat's `n`)
    fake.reset()
    many = {"model": MODEL, "prompt": ["one", "two"], "n": 2, "max_tokens": 1000}
    guard, gateway = start(tokens_a_day=2000)
    reply = oai(gateway).completions.create(**many)
    left = room(2000, many, "openai.completions", MODEL)
    assert 1000 < left < 4 * 1000
    assert fake.bodies("/v1/completions")[0]["max_tokens"] == left // 4
    # with room for all four, the caller's maximum is sent as given
    fake.reset()
    few = {**many, "max_tokens": 100}
    oai(gateway).completions.create(**few)
    assert fake.bodies("/v1/completions")[0]["max_tokens"] == 100
    assert len(reply.choices) == 4


def test_token_id_prompts_are_counted_one_token_each():
    count = ug._core.count_prompt(
        {"model": "gpt-4o", "prompt": [[1, 2, 3], [4, 5]]}, provider="openai.completions"
    )
    assert count["tokens"] == 5
    flat = ug._core.count_prompt({"prompt": [7, 8, 9, 10]}, provider="openai.completions")
    assert flat["tokens"] == 4


def test_bad_shapes_answer_400_in_openai_shape_and_hold_nothing(fake, start):
    guard, gateway = start()
    auth = {"authorization": f"Bearer {ALICE}"}
    for body, field in [
        ({"model": MODEL, "prompt": 7}, "prompt"),
        ({"model": MODEL, "prompt": ["a", {"b": 1}]}, "prompt[1]"),
        ({"model": MODEL}, "prompt"),
        ({"model": MODEL, "prompt": "hi", "max_tokens": -1}, "max_tokens"),
        ({"model": MODEL, "prompt": "hi", "n": "two"}, "n"),
    ]:
        r = httpx.post(f"{gateway.url}/v1/completions", json=body, headers=auth)
        assert r.status_code == 400, (body, r.text)
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error" and field in error["message"], error
    assert fake.requests == []
    assert reserved(guard, "alice", MODEL) == 0
