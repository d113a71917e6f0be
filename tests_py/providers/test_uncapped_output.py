"""A call without an output maximum does not lock out the next one, and `n` answers are
reserved for (issue 31, items 5 and 6). The real `openai`, `anthropic` and `ollama` SDKs talk
HTTP to the gateway (or through the wrappers) in front of the fake provider.

- What a call without `max_tokens` holds is `settings.uncapped_output`: by default half of
  what is left, so a second call still finds room; `"model"` holds the model's maximum.
- A refusal caused by the holds of calls in progress, not by use, says so (reason
  `USAGE_LIMIT_HELD`, 429 `usage_limit_held`, `retry-after`, `x-should-retry: true`) in every
  provider's shape.
- `n` answers: the call holds prompt + n × output maximum, and a call that fits is sent as
  given."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from provider_support import policy, prompt_tokens, reserved, used
from usage_guard.openai import GuardedOpenAI

KEY = "sk-dave-uncapped"
MESSAGES = [{"role": "user", "content": "Say hello a few times."}]
DAY = 20_000


def day_policy(fake: FakeProvider, **settings: Any) -> dict[str, Any]:
    """dave has 20,000 tokens a day on every model; gpt-4o may write 32,768 tokens, more than
    the day, so a call without max_tokens could hold all of it."""
    doc = policy(tokens_a_day=DAY, users=("dave",))
    doc["models"]["gpt-4o"]["max_output_tokens"] = 32768
    doc["providers"] = {p: {"base_url": fake.url} for p in ("openai", "anthropic", "ollama")}
    doc["gateway"] = {"keys": {"dave": {"key": KEY, "principal": "dave"}}}
    if settings:
        doc["settings"] = settings
    return doc


@pytest.fixture
def start(fake: FakeProvider) -> Iterator[Any]:
    running: list[ug.Gateway] = []

    def make(**settings: Any) -> tuple[ug.Guard, ug.Gateway]:
        guard = ug.Guard(ug.Policy.from_dict(day_policy(fake, **settings)))
        gateway = ug.Gateway(guard, "127.0.0.1:0")
        running.append(gateway)
        return guard, gateway

    yield make
    for g in running:
        g.shutdown()
        assert g.wait(10)


def oai(gateway: ug.Gateway, retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=retries)


def open_stream(gateway: ug.Gateway) -> Any:
    """A stream without max_tokens, left open (the fake answers slowly)."""
    return oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)


def test_a_call_without_max_tokens_leaves_room_for_the_next_by_default(fake, start):
    guard, gateway = start()
    fake.chunk_delay = 0.05
    prompt = prompt_tokens({"model": "gpt-4o", "messages": MESSAGES}, "openai", "gpt-4o")
    stream = open_stream(gateway)
    first = fake.bodies("/v1/chat/completions")[0]
    # half of what was left after the prompt, not the whole day
    assert first["max_completion_tokens"] == (DAY - prompt) // 2
    assert reserved(guard, "dave", "gpt-4o") == prompt + (DAY - prompt) // 2
    # the second call, while the first is open, is admitted
    reply = oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert reply.choices[0].message.content
    second = fake.bodies("/v1/chat/completions")[1]
    left = DAY - prompt - (DAY - prompt) // 2 - prompt
    assert second["max_completion_tokens"] == left // 2
    for _ in stream:
        pass
    settled(guard)
    assert used(guard, "dave", "gpt-4o") == 2 * (21 + 12)


def test_the_output_is_clamped_to_a_number_of_tokens(fake, start):
    guard, gateway = start(uncapped_output=1000)
    oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert fake.bodies("/v1/chat/completions")[0]["max_completion_tokens"] == 1000
    # a caller's own maximum is the caller's: the setting never applies to it
    oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=3000)
    assert fake.bodies("/v1/chat/completions")[1]["max_tokens"] == 3000


def settled(guard: ug.Guard) -> None:
    """Waits (briefly) for a stream's bill, which lands just after its last chunk."""
    deadline = time.monotonic() + 5
    while reserved(guard, "dave", "gpt-4o") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reserved(guard, "dave", "gpt-4o") == 0


def held_message(text: str) -> None:
    assert "held by calls in progress" in text, text
    assert "of your 20,000 tokens a day" in text, text
    assert "You have used" not in text


def test_a_refusal_by_holds_says_so_and_is_retryable_openai(fake, start):
    guard, gateway = start(uncapped_output="model")
    fake.chunk_delay = 0.05
    stream = open_stream(gateway)
    with pytest.raises(openai.RateLimitError) as caught:
        oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    response = caught.value.response
    assert response.status_code == 429
    assert response.headers["x-should-retry"] == "true"
    assert response.headers["retry-after"] == "5"
    error = response.json()["error"]
    assert error["code"] == "usage_limit_held"
    held_message(error["message"])
    for _ in stream:
        pass
    # once the stream ended, its hold is back: the same call goes through
    oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=50)


def test_an_sdk_retries_a_refusal_by_holds_and_gets_through(fake, start):
    guard, gateway = start(uncapped_output="model")
    fake.chunk_delay = 0.1
    stream = open_stream(gateway)
    drain = threading.Thread(target=lambda: [None for _ in stream])
    drain.start()
    # the SDK's own retry (after retry-after) finds the room the stream gave back
    reply = oai(gateway, retries=2).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, max_tokens=50
    )
    drain.join()
    assert reply.choices[0].message.content
    settled(guard)
    assert used(guard, "dave", "gpt-4o") == 2 * (21 + 12)


def hold_the_day(guard: ug.Guard, model: str) -> ug.Ticket:
    """A call in progress on `model` holding all but 100 tokens of the day."""
    return guard.admit("dave", model, prompt_tokens=DAY - 400, max_tokens=300)


def test_a_refusal_by_holds_in_the_anthropic_shape(fake, start):
    guard, gateway = start()
    ticket = hold_the_day(guard, "claude-haiku-4-5")
    client = anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as caught:
        client.messages.create(model="claude-haiku-4-5", max_tokens=500, messages=MESSAGES)
    response = caught.value.response
    assert response.headers["x-should-retry"] == "true"
    assert int(response.headers["retry-after"]) >= 1
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
    assert body["error"]["code"] == "usage_limit_held"
    held_message(body["error"]["message"])
    ticket.release()
    client.messages.create(model="claude-haiku-4-5", max_tokens=500, messages=MESSAGES)


def test_a_refusal_by_holds_in_the_ollama_shape(fake, start):
    guard, gateway = start()
    ticket = hold_the_day(guard, "llama3.2")
    client = ollama.Client(host=gateway.url, headers={"authorization": f"Bearer {KEY}"})
    options = {"num_predict": 500}
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(model="llama3.2", messages=MESSAGES, options=options)
    assert caught.value.status_code == 429
    held_message(caught.value.error)
    raw = httpx.post(
        f"{gateway.url}/api/chat",
        json={"model": "llama3.2", "messages": MESSAGES, "stream": False, "options": options},
        headers={"authorization": f"Bearer {KEY}"},
    )
    assert raw.headers["x-should-retry"] == "true" and "retry-after" in raw.headers
    ticket.release()
    client.chat(model="llama3.2", messages=MESSAGES, options=options)


def test_the_wrapper_raises_usage_limit_held_and_a_used_day_stays_not_retryable(fake, start):
    guard, _ = start()
    ticket = hold_the_day(guard, "gpt-4o")
    client = GuardedOpenAI(
        openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk", max_retries=0), guard, user="dave"
    )
    with pytest.raises(ug.UsageLimitHeld) as caught:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=500)
    assert isinstance(caught.value, ug.UsageLimitError)
    assert caught.value.reason == "USAGE_LIMIT_HELD" and caught.value.retry_after == 5
    _, headers, _ = caught.value.to_http("openai")
    assert headers["x-should-retry"] == "true"
    # the day really used: the refusal is the old one, and not retryable
    ticket.bill(DAY - 400, 300)
    with pytest.raises(ug.UsageLimitError) as used_up:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=500)
    assert not isinstance(used_up.value, ug.UsageLimitHeld)
    assert used_up.value.to_http("openai")[1]["x-should-retry"] == "false"


def test_check_names_what_the_setting_means(tmp_path, fake, capsys):
    from usage_guard.cli import check

    doc = day_policy(fake, uncapped_output="model")
    del doc["gateway"], doc["providers"]
    path = tmp_path / "policy.json"
    import json

    path.write_text(json.dumps(doc))
    assert check(str(path)) == 0
    out = capsys.readouterr().out
    assert "note: settings.uncapped_output" in out
    assert "one such call can hold a whole budget" in out
    with pytest.raises(ug.PolicyError) as bad:
        ug.Policy.from_dict({**doc, "settings": {"uncapped_output": "150%"}})
    assert "settings.uncapped_output" in str(bad.value) and "150%" in str(bad.value)


# -- item 6: n answers ---------------------------------------------------------------------


def test_n_answers_are_reserved_for_and_a_call_that_fits_is_sent_unchanged(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=1_000_000, users=("dave",)))
    prompt = prompt_tokens({"model": "gpt-4o", "messages": MESSAGES}, "openai", "gpt-4o")
    held: list[int] = []
    fake.on_request = lambda _: held.append(reserved(guard, "dave", "gpt-4o"))
    client = GuardedOpenAI(
        openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk", max_retries=0), guard, user="dave"
    )
    client.chat.completions.create(model="gpt-4o", messages=MESSAGES, n=10, max_tokens=50)
    body = fake.bodies("/v1/chat/completions")[0]
    assert body["max_tokens"] == 50 and body["n"] == 10
    assert "max_completion_tokens" not in body
    assert held == [prompt + 10 * 50]


def test_n_answers_with_a_small_maximum_run_without_limits(fake, make_guard):
    doc = policy(users=("dave",))
    doc["settings"] = {"anonymous": "unlimited"}
    guard = make_guard(doc)
    client = GuardedOpenAI(
        openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk", max_retries=0), guard, user=None
    )
    client.chat.completions.create(model="gpt-4o", messages=MESSAGES, n=10, max_tokens=5)
    body = fake.bodies("/v1/chat/completions")[0]
    assert body["max_tokens"] == 5 and body["n"] == 10


def test_n_answers_share_only_what_is_left(fake, make_guard):
    guard = make_guard(policy(tokens_a_day=1_000, users=("dave",)))
    prompt = prompt_tokens({"model": "gpt-4o", "messages": MESSAGES}, "openai", "gpt-4o")
    client = GuardedOpenAI(
        openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk", max_retries=0), guard, user="dave"
    )
    client.chat.completions.create(model="gpt-4o", messages=MESSAGES, n=3, max_tokens=5000)
    body = fake.bodies("/v1/chat/completions")[0]
    # tokens left after the prompt and its margin, shared by the 3 answers
    assert body["max_tokens"] == (1_000 - prompt) // 3
