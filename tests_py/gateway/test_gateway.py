"""The gateway (`usage-guard serve`): the real `openai`, `anthropic` and `ollama` SDKs talking
HTTP to the gateway, in front of the fake provider; refusals before the provider sees the
call, fitted calls, streams billed when they end, break or are dropped, bad input."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
import usage_guard as ug
from fake_provider import WORD, FakeProvider
from provider_support import policy, prompt_tokens, reserved, used

MESSAGES = [{"role": "user", "content": "Say hello a few times."}]
ALICE, BOB = "sk-alice-secret", "sk-bob-secret"


def gateway_policy(fake: FakeProvider, **kw: Any) -> dict[str, Any]:
    """provider_support's policy, with every provider sent to the fake and two keys: alice's
    written plain (hashed when read), bob's as its SHA-256 digest."""
    doc = policy(**kw)
    doc["providers"] = {p: {"base_url": fake.url} for p in ("openai", "anthropic", "ollama")}
    doc["gateway"] = {
        "keys": {
            "alice-laptop": {"key": ALICE, "principal": "alice", "credential": "laptop"},
            hashlib.sha256(BOB.encode()).hexdigest(): {"principal": "bob", "models": ["gpt-4o"]},
        }
    }
    return doc


@pytest.fixture
def start(fake: FakeProvider) -> Iterator[Any]:
    """`start(**policy_kw)` → (guard, gateway); stopped after the test."""
    running: list[ug.Gateway] = []

    def make(**kw: Any) -> tuple[ug.Guard, ug.Gateway]:
        guard = ug.Guard(ug.Policy.from_dict(gateway_policy(fake, **kw)))
        gateway = ug.Gateway(guard, "127.0.0.1:0")
        running.append(gateway)
        return guard, gateway

    yield make
    for g in running:
        g.shutdown()
        assert g.wait(10)


def oai(gateway: ug.Gateway, key: str = ALICE) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)


def settle(guard: ug.Guard, user: str, model: str) -> None:
    """Waits (briefly) for a bill that lands after the answer (a dropped stream)."""
    for _ in range(100):
        if reserved(guard, user, model) == 0:
            return
        time.sleep(0.02)


def test_openai_plain_bills_reported_usage_and_passes_unknown_fields(fake, start):
    guard, gateway = start()
    reply = oai(gateway).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, max_tokens=100, extra_body={"x_unknown": {"a": [1]}}
    )
    assert reply.choices[0].message.content == WORD * 12
    assert used(guard, "alice", "gpt-4o") == 21 + 12
    assert reserved(guard, "alice", "gpt-4o") == 0
    sent = fake.requests[0]
    assert sent.body["x_unknown"] == {"a": [1]} and sent.body["max_tokens"] == 100
    # the gateway's key is not the provider's: no upstream key configured, none sent
    assert "authorization" not in sent.headers


def test_openai_stream_asks_for_usage_and_bills_it(fake, start):
    guard, gateway = start()
    chunks = list(
        oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == WORD * 12
    # the caller did not ask for the usage chunk: the gateway asked, and kept it back
    assert fake.requests[0].body["stream_options"] == {"include_usage": True}
    assert all(c.choices for c in chunks)
    settle(guard, "alice", "gpt-4o")  # a stream is billed once its end has been passed on
    assert used(guard, "alice", "gpt-4o") == 21 + 12
    # a caller that asks gets it
    asked = list(
        oai(gateway).chat.completions.create(
            model="gpt-4o",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert asked[-1].usage is not None and asked[-1].usage.completion_tokens == 12


def test_refused_before_the_provider_in_openai_shape(fake, start):
    guard, gateway = start(tokens_a_day=10)
    with pytest.raises(openai.RateLimitError) as e:
        oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert fake.requests == []
    assert e.value.status_code == 429
    body = e.value.response.json()
    assert body["error"]["code"] == "usage_limit_reached"
    headers = e.value.response.headers
    assert headers["x-should-retry"] == "false"
    assert headers["x-ratelimit-limit-tokens"] == "10"
    assert headers["x-ratelimit-remaining-tokens"] == "0"
    assert headers["ratelimit-policy"] == '"tokens";q=10;qu="tokens";w=86400'
    assert reserved(guard, "alice", "gpt-4o") == 0


def test_a_rate_limit_refusal_says_when_to_come_back(fake, start):
    rule = {"metric": "requests", "amount": 1, "window": "minute"}
    guard, gateway = start(rules=[rule])
    oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    with pytest.raises(openai.RateLimitError) as e:
        oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    headers = e.value.response.headers
    assert e.value.response.json()["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(headers["retry-after"]) <= 120
    assert headers["x-ratelimit-limit-requests"] == "1"
    assert headers["ratelimit"].startswith('"requests";r=0;t=')
    assert len(fake.requests) == 1


def test_a_fitted_call_is_lowered_and_says_so(fake, start):
    guard, gateway = start(tokens_a_day=400)
    request = {"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 1000}
    raw = oai(gateway).chat.completions.with_raw_response.create(**request)
    sent = fake.requests[0].body["max_tokens"]
    assert sent == 400 - prompt_tokens(request, "openai", "gpt-4o")
    assert "max_output_tokens=" in raw.headers["x-usage-restriction"]
    assert raw.headers["x-ratelimit-limit-tokens"] == "400"
    assert raw.parse().choices[0].message.content == WORD * 12
    assert used(guard, "alice", "gpt-4o") == 21 + 12


def stream_then_hang_up(url: str, path: str, request: dict[str, Any], words: int) -> None:
    """Streams `request` through the gateway as alice and hangs up after `words` words."""
    got = 0
    with httpx.Client(timeout=10) as http:
        with http.stream(
            "POST", f"{url}{path}", json=request, headers={"authorization": f"Bearer {ALICE}"}
        ) as r:
            for line in r.iter_lines():
                if WORD in line:
                    got += 1
                if got == words:
                    return


def test_client_gone_mid_stream_is_billed_the_usage_the_provider_reports(fake, start):
    """The client hangs up after 5 of 60 words: the gateway reads the upstream on to its
    usage event (docs/gateway.md) and bills what the provider reports."""
    guard, gateway = start()
    fake.output_tokens, fake.chunk_delay = 60, 0.03
    request = {"model": "gpt-4o", "messages": MESSAGES, "stream": True}
    stream_then_hang_up(gateway.url, "/v1/chat/completions", request, words=5)
    for _ in range(500):  # the rest of the stream comes in some 1.7 s
        if reserved(guard, "alice", "gpt-4o") == 0:
            break
        time.sleep(0.02)
    assert used(guard, "alice", "gpt-4o") == fake.input_tokens + 60
    assert reserved(guard, "alice", "gpt-4o") == 0


def test_a_stop_waits_for_a_stream_read_on_after_its_client_left(fake, start):
    """The client hangs up after 5 of 60 words and the gateway is stopped at once: the drain
    waits for the stream read on in the background, which bills what the provider reports
    (cut off with its serving thread, it was billed only the words delivered)."""
    guard, gateway = start()
    fake.output_tokens, fake.chunk_delay = 60, 0.03
    request = {"model": "gpt-4o", "messages": MESSAGES, "stream": True}
    stream_then_hang_up(gateway.url, "/v1/chat/completions", request, words=5)
    gateway.shutdown()
    assert gateway.wait(30)
    assert used(guard, "alice", "gpt-4o") == fake.input_tokens + 60
    assert reserved(guard, "alice", "gpt-4o") == 0


def test_upstream_broken_stream_bills_what_arrived(fake, start):
    guard, gateway = start()
    fake.output_tokens, fake.break_after = 50, 4
    request = {"model": "gpt-4o", "messages": MESSAGES}
    got = []
    with pytest.raises(Exception) as e:
        for chunk in oai(gateway).chat.completions.create(**request, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
    assert not isinstance(e.value, openai.APIStatusError)
    assert len(got) == 4
    settle(guard, "alice", "gpt-4o")
    assert used(guard, "alice", "gpt-4o") == prompt_tokens(request, "openai", "gpt-4o") + 4


def test_upstream_500_is_passed_on_in_the_gateway_s_words_and_released(fake, start):
    guard, gateway = start()
    error = {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}}
    fake.refusal = (500, {}, error)
    with pytest.raises(openai.InternalServerError) as e:
        oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    passed = e.value.response.json()["error"]
    assert e.value.response.status_code == 500
    assert (passed["type"], passed["code"]) == ("server_error", None)
    assert "boom" not in passed["message"]
    assert used(guard, "alice", "gpt-4o") == 0
    assert reserved(guard, "alice", "gpt-4o") == 0


def test_keys(fake, start):
    guard, gateway = start()
    with pytest.raises(openai.AuthenticationError) as e:
        oai(gateway, key="sk-nobody").chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert e.value.response.json()["error"]["code"] == "invalid_api_key"
    client = anthropic.Anthropic(base_url=gateway.url, api_key="sk-nobody", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as a:
        client.messages.create(model="claude-haiku-4-5", max_tokens=50, messages=MESSAGES)
    assert a.value.response.json()["error"]["type"] == "authentication_error"
    r = httpx.post(f"{gateway.url}/api/chat", json={"model": "llama3.2", "messages": MESSAGES})
    assert r.status_code == 401 and "API key" in r.json()["error"]
    # bob's key (written as its digest) works, and only for the models it lists
    reply = oai(gateway, key=BOB).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert reply.usage is not None
    assert used(guard, "bob", "gpt-4o") == 21 + 12
    with pytest.raises(openai.PermissionDeniedError):
        oai(gateway, key=BOB).embeddings.create(model="text-embedding-3-small", input="hi")
    assert len(fake.requests) == 1
    models = oai(gateway, key=BOB).models.list()
    assert [m.id for m in models.data] == ["gpt-4o"]
    assert len(oai(gateway).models.list().data) == 5


def test_bad_input_answers_400_or_413_in_shape_and_holds_nothing(fake, start):
    guard, gateway = start()
    auth = {"authorization": f"Bearer {ALICE}", "content-type": "application/json"}
    cases = [
        ("/v1/chat/completions", b"{not json", "openai"),
        ("/v1/chat/completions", b"[1, 2]", "openai"),
        ("/v1/chat/completions", b'{"messages": []}', "openai"),
        ("/v1/chat/completions", b'{"model": "gpt-4o", "messages": 7}', "openai"),
        (
            "/v1/chat/completions",
            b'{"model": "gpt-4o", "messages": [], "max_tokens": -3}',
            "openai",
        ),
        ("/v1/chat/completions", b'{"model": "gpt-4o", "stream": "yes", "messages": []}', "openai"),
        ("/v1/messages", b"{oops", "anthropic"),
        ("/v1/messages", b'{"model": "claude-haiku-4-5", "messages": "x"}', "anthropic"),
        ("/api/chat", b"{oops", "ollama"),
        ("/api/chat", b'{"model": "llama3.2", "messages": {"a": 1}}', "ollama"),
    ]
    for path, body, shape in cases:
        r = httpx.post(f"{gateway.url}{path}", content=body, headers=auth)
        assert r.status_code == 400, (path, body, r.text)
        answer = r.json()
        if shape == "openai":
            assert answer["error"]["type"] == "invalid_request_error", answer
            assert answer["error"]["message"]
        elif shape == "anthropic":
            assert answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
        else:
            assert isinstance(answer["error"], str) and answer["error"]
    big = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "' + b"a" * 10_000_000
    r = httpx.post(f"{gateway.url}/v1/chat/completions", content=big + b'"}]}', headers=auth)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
    assert fake.requests == []
    for model in ("gpt-4o", "claude-haiku-4-5", "llama3.2"):
        assert reserved(guard, "alice", model) == 0


def test_anthropic_plain_and_streamed(fake, start):
    guard, gateway = start()
    client = anthropic.Anthropic(base_url=gateway.url, api_key=ALICE, max_retries=0)
    msg = client.messages.create(model="claude-haiku-4-5", max_tokens=100, messages=MESSAGES)
    assert msg.content[0].text == WORD * 12  # type: ignore[union-attr]
    assert used(guard, "alice", "claude-haiku-4-5") == 21 + 12
    with client.messages.stream(
        model="claude-haiku-4-5", max_tokens=100, messages=MESSAGES
    ) as stream:
        text = "".join(stream.text_stream)
    assert text == WORD * 12
    settle(guard, "alice", "claude-haiku-4-5")
    assert used(guard, "alice", "claude-haiku-4-5") == 2 * (21 + 12)
    assert fake.requests[0].headers["anthropic-version"]


def test_anthropic_refusal_shape(fake, start):
    guard, gateway = start(tokens_a_day=10)
    client = anthropic.Anthropic(base_url=gateway.url, api_key=ALICE, max_retries=0)
    with pytest.raises(anthropic.RateLimitError) as e:
        client.messages.create(model="claude-haiku-4-5", max_tokens=100, messages=MESSAGES)
    assert e.value.response.json()["error"]["type"] == "rate_limit_error"
    assert e.value.response.headers["anthropic-ratelimit-tokens-limit"] == "10"
    assert fake.requests == []


def test_ollama_chat_plain_and_streamed(fake, start):
    guard, gateway = start()
    client = ollama.Client(host=gateway.url, headers={"authorization": f"Bearer {ALICE}"})
    reply = client.chat(model="llama3.2", messages=MESSAGES, stream=False)
    assert reply.message.content == WORD * 12
    assert used(guard, "alice", "llama3.2") == 21 + 12
    parts = list(client.chat(model="llama3.2", messages=MESSAGES, stream=True))
    assert "".join(p.message.content or "" for p in parts) == WORD * 12
    assert parts[-1].done
    settle(guard, "alice", "llama3.2")
    assert used(guard, "alice", "llama3.2") == 2 * (21 + 12)


def test_health_readiness_and_metrics(fake, start):
    guard, gateway = start(tokens_a_day=10)
    assert httpx.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway.url}/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    with pytest.raises(openai.RateLimitError):
        oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    text = httpx.get(f"{gateway.url}/metrics").text
    assert text.startswith("# HELP usage_guard_")
    assert "usage_guard_refused_total 1" in text
    refusals = 'refusals_total{reason="USAGE_LIMIT_DOES_NOT_FIT",limit_type="direct"} 1'
    assert f"usage_guard_{refusals}" in text
    assert 'status="429"' in text
    assert "usage_guard_admission_seconds_count 1" in text


def test_keys_never_reach_the_logs(fake, start, caplog):
    caplog.set_level("DEBUG", logger="usage_guard")
    guard, gateway = start()
    oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    with pytest.raises(openai.AuthenticationError):
        oai(gateway, key="sk-wrong-key").chat.completions.create(model="gpt-4o", messages=MESSAGES)
    logged = json.dumps([r.getMessage() for r in caplog.records])
    assert ALICE not in logged and "sk-wrong-key" not in logged


def admin(gateway: ug.Gateway, method: str, path: str, token: str = "adm-1", **kw: Any) -> Any:
    return httpx.request(
        method, f"{gateway.url}/admin/{path}", headers={"authorization": f"Bearer {token}"}, **kw
    )


def test_admin_api(fake, start, monkeypatch, tmp_path):
    monkeypatch.setenv("UG_TEST_ADMIN", "adm-1")
    document = gateway_policy(fake, tokens_a_day=5000)
    document["gateway"]["admin_token_env"] = "UG_TEST_ADMIN"
    ledger = ug.SqliteLedger(str(tmp_path / "usage.db"))
    guard = ug.Guard(ug.Policy.from_dict(document), ledger=ledger)
    gateway = ug.Gateway(guard, "127.0.0.1:0")
    try:
        assert admin(gateway, "GET", "policy", token="wrong").status_code == 401
        oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=10)
        r = admin(
            gateway, "GET", "control/effective", params={"principal": "alice", "model": "gpt-4o"}
        )
        assert r.status_code == 200
        view = r.json()
        assert view["source"] == {"type": "direct", "id": "alice"}
        tokens = next(rule for rule in view["rules"] if rule["metric"] == "tokens")
        assert (tokens["amount"], tokens["used"], tokens["reserved"]) == (5000, 31, 0)  # 21 + 10
        assert tokens["left"] == 5000 - 31 and tokens["resets_at"].endswith("Z")
        guard.close()
        r = admin(gateway, "GET", "usage", params={"group_by": "user,model"})
        assert r.json()["groups"] == [
            {
                "user": "alice",
                "model": "gpt-4o",
                "requests": 1,
                "input_tokens": 21,
                "cached_input_tokens": 0,
                "output_tokens": 10,
                "reasoning_tokens": 0,
                "tokens": 31,
                "cost_micros": r.json()["groups"][0]["cost_micros"],
                "compute_ms": r.json()["groups"][0]["compute_ms"],
            }
        ]
        assert admin(gateway, "GET", "usage", params={"group_by": "color"}).status_code == 400
        # a bad policy is refused with every error; the running one stays
        bad = {**document, "gateway": {**document["gateway"], "tls": 1}, "colour": 2}
        r = admin(gateway, "PUT", "policy", json=bad)
        assert r.status_code == 400
        assert {e["path"] for e in r.json()["errors"]} == {"colour", "gateway.tls"}
        before = admin(gateway, "GET", "policy").json()
        assert before["version"] == 1 and "alice-laptop" in str(before["keys"])
        assert ALICE not in str(before)
        # a valid one replaces it at once: alice now has 10 tokens a day
        r = admin(gateway, "PUT", "policy", json=gateway_policy(fake, tokens_a_day=10))
        assert r.status_code == 200 and r.json()["version"] == 2
        with pytest.raises(openai.RateLimitError):
            oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
        # the new policy has no admin token: the admin API is off
        assert admin(gateway, "GET", "policy").status_code == 403
    finally:
        gateway.shutdown()
        assert gateway.wait(10)


def test_other_endpoints(fake, start):
    guard, gateway = start()
    client = oai(gateway)
    resp = client.responses.create(model="gpt-4o", input="Hello", max_output_tokens=50)
    assert resp.output_text == WORD * 12
    emb = client.embeddings.create(model="text-embedding-3-small", input=["a", "b"])
    assert len(emb.data) == 2
    events = list(client.responses.create(model="gpt-4o", input="Hello", stream=True))
    assert events[-1].type == "response.completed"
    local = ollama.Client(host=gateway.url, headers={"authorization": f"Bearer {ALICE}"})
    assert local.generate(model="llama3.2", prompt="Hi", stream=False).response == WORD * 12
    assert len(local.embed(model="nomic-embed-text", input=["a"]).embeddings) == 1
    assert used(guard, "alice", "gpt-4o") == 2 * (21 + 12)
    assert used(guard, "alice", "text-embedding-3-small") == 21
    assert used(guard, "alice", "llama3.2") == 21 + 12
    assert used(guard, "alice", "nomic-embed-text") == 21


def test_upstream_timeout_is_504_billed_the_prompt(fake, start):
    guard, gateway = start()
    document = gateway_policy(fake)
    document["gateway"]["upstream_timeout_seconds"] = 1
    guard.set_policy(ug.Policy.from_dict(document))
    fake.delay = 2.5
    with pytest.raises(openai.APIStatusError) as e:
        oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert e.value.status_code == 504
    assert e.value.response.json()["error"]["code"] == "upstream_timeout"
    # The provider had the call: its prompt is billed, the rest of the hold given back.
    prompt = prompt_tokens({"model": "gpt-4o", "messages": MESSAGES}, "openai", "gpt-4o")
    assert reserved(guard, "alice", "gpt-4o") == 0 and used(guard, "alice", "gpt-4o") == prompt


def test_concurrent_calls_never_overspend(fake, start):
    """32 clients at once on a budget for about 10 calls: what is billed stays within the
    amount (each call's output was clamped to its reservation), and every call settled."""

    guard, gateway = start(tokens_a_day=900)
    fake.output_tokens = 200

    at_once_within_budget(guard, gateway, 32)


def at_once_within_budget(guard: ug.Guard, gateway: ug.Gateway, calls: int) -> None:
    """`calls` clients at once on alice's 900-token budget (each asking for 500 tokens of
    output): some are admitted and some refused; what is billed is what the admitted calls
    reported, within the budget, and nothing stays reserved."""
    import concurrent.futures

    def one(_: int) -> int:
        try:
            reply = oai(gateway).chat.completions.create(
                model="gpt-4o", messages=MESSAGES, max_tokens=500
            )
            return reply.usage.completion_tokens if reply.usage else 0
        except openai.RateLimitError:
            return -1

    with concurrent.futures.ThreadPoolExecutor(calls) as pool:
        results = list(pool.map(one, range(calls)))
    admitted = [r for r in results if r >= 0]
    assert admitted and len(admitted) < calls
    assert used(guard, "alice", "gpt-4o") <= 900
    assert used(guard, "alice", "gpt-4o") == 21 * len(admitted) + sum(admitted)
    assert reserved(guard, "alice", "gpt-4o") == 0


def test_anthropic_and_ollama_broken_streams_bill_what_arrived(fake, start):
    guard, gateway = start()
    fake.output_tokens, fake.break_after = 50, 3
    client = anthropic.Anthropic(base_url=gateway.url, api_key=ALICE, max_retries=0)
    request = {"model": "claude-haiku-4-5", "max_tokens": 100, "messages": MESSAGES}
    got = []
    # The gateway ends the broken stream with an `event: error` the SDK raises.
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(**request) as stream:  # type: ignore[arg-type]
            for text in stream.text_stream:
                got.append(text)
    assert len(got) == 3
    settle(guard, "alice", "claude-haiku-4-5")
    # message_start reported the input (21); the output is what was delivered
    assert used(guard, "alice", "claude-haiku-4-5") == 21 + 3
    local = ollama.Client(host=gateway.url, headers={"authorization": f"Bearer {ALICE}"})
    parts = []
    with pytest.raises(ollama.ResponseError):  # its `{"error": ...}` last line
        for part in local.chat(model="llama3.2", messages=MESSAGES, stream=True):
            parts.append(part.message.content)
    assert len(parts) == 3
    settle(guard, "alice", "llama3.2")
    sent = fake.bodies("/api/chat")[-1]  # as the SDK sent it (its extra fields count too)
    assert used(guard, "alice", "llama3.2") == prompt_tokens(sent, "ollama", "llama3.2") + 3


def test_shutdown_drains_a_running_stream_and_bills_it(fake, start):
    guard, gateway = start()
    fake.output_tokens, fake.chunk_delay = 20, 0.05
    got: list[str] = []

    def consume() -> None:
        for chunk in oai(gateway).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True
        ):
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)

    import threading

    reader = threading.Thread(target=consume)
    reader.start()
    while not got:
        time.sleep(0.01)
    gateway.shutdown()
    # new calls are refused while draining
    with pytest.raises((openai.APIStatusError, openai.APIConnectionError)):
        oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    reader.join(10)
    assert gateway.wait(10)
    assert len(got) == 20
    assert used(guard, "alice", "gpt-4o") == 21 + 20
    assert reserved(guard, "alice", "gpt-4o") == 0


def test_two_gateways_on_one_redis_share_the_budget(fake, redis_server):
    """Two gateways (and a Python guard) on one real redis-server: one budget. A redis
    restart (state lost) fences cost rules: /readyz turns 503 and calls are refused in shape
    until an operator recovers."""
    document = gateway_policy(fake, tokens_a_day=1000)
    gateways = [
        ug.Gateway(
            ug.Guard(ug.Policy.from_dict(document), store=ug.RedisStore(redis_server.url)),
            "127.0.0.1:0",
        )
        for _ in range(2)
    ]
    reader = ug.Guard(ug.Policy.from_dict(document), store=ug.RedisStore(redis_server.url))
    try:
        for g in gateways:
            oai(g).chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=50)
        assert used(reader, "alice", "gpt-4o") == 2 * (21 + 12)
        assert httpx.get(f"{gateways[0].url}/readyz").status_code == 200
        redis_server.restart()
        codes = []
        for _ in range(20):  # the first call may find the old connection broken
            with pytest.raises(openai.APIStatusError) as e:
                oai(gateways[0]).chat.completions.create(model="gpt-4o", messages=MESSAGES)
            assert e.value.status_code == 503
            codes.append(e.value.response.json()["error"]["code"])
            if codes[-1] == "budget_recovering":
                break
            time.sleep(0.1)
        assert codes[-1] == "budget_recovering", codes
        assert set(codes) <= {"usage_limits_unavailable", "budget_recovering"}
        assert httpx.get(f"{gateways[0].url}/readyz").status_code == 503
    finally:
        for g in gateways:
            g.shutdown()
            assert g.wait(10)
