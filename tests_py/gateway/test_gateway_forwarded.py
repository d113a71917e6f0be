"""What the gateway forwards is what it admitted: a key twice in a body is refused (a provider
may read the first where serde read the last), the body sent is the parsed request with only
the fitted fields changed (unknown fields and their order kept), and every output maximum a
provider reads carries the fitted value (chat's `max_tokens` beside `max_completion_tokens`),
two that disagree being refused. The property: for any body the gateway accepts, the model,
output maximum and `n` the upstream reads are those admission reserved for (prompt + n ×
output maximum), and a caller's maximum that fits is sent as given."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider, Recorded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from provider_support import policy, prompt_tokens, reserved

ALICE = "sk-alice-forwarded"
MESSAGES = [{"role": "user", "content": "Say hello a few times."}]
MINI = {"provider": "openai", "max_output_tokens": 16384, "prices": {"input": 0.15, "output": 0.6}}


def forwarded_policy(fake: FakeProvider, tokens_a_day: int) -> dict[str, Any]:
    doc = policy(tokens_a_day=tokens_a_day, users=("alice",))
    doc["models"]["gpt-4o-mini"] = {"display_name": "gpt-4o-mini", **MINI}
    rules = doc["limits"]["direct"][0]["rules"]
    doc["limits"]["direct"].append({"user": "alice", "model": "gpt-4o-mini", "rules": rules})
    doc["providers"] = {p: {"base_url": fake.url} for p in ("openai", "anthropic", "ollama")}
    doc["gateway"] = {"keys": {"alice": {"key": ALICE, "principal": "alice"}}}
    return doc


@pytest.fixture
def start(fake: FakeProvider, clock: ug.ManualClock) -> Iterator[Any]:
    running: list[ug.Gateway] = []

    def make(tokens_a_day: int = 1_000_000) -> tuple[ug.Guard, ug.Gateway]:
        policy = ug.Policy.from_dict(forwarded_policy(fake, tokens_a_day))
        guard = ug.Guard(policy, clock=clock)
        gateway = ug.Gateway(guard, "127.0.0.1:0")
        running.append(gateway)
        return guard, gateway

    yield make
    for g in running:
        g.shutdown()
        assert g.wait(10)


# One client for every call (a client per call builds its TLS context each time: slow).
HTTP = httpx.Client(timeout=30)


def post(gateway: ug.Gateway, path: str, raw: bytes) -> httpx.Response:
    headers = {"authorization": f"Bearer {ALICE}", "content-type": "application/json"}
    return HTTP.post(f"{gateway.url}{path}", content=raw, headers=headers)


def pairs(raw: bytes) -> list[tuple[str, Any]]:
    """The top-level (key, value) pairs of a JSON object, every one, in order."""
    found: list[list[tuple[str, Any]]] = []

    def keep(items: list[tuple[str, Any]]) -> dict[str, Any]:
        found.append(items)
        return dict(items)

    json.loads(raw, object_pairs_hook=keep)
    return found[-1]


def no_key_twice(raw: bytes) -> bool:
    twice: list[str] = []

    def check(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        twice.extend(k for k in set(keys) if keys.count(k) > 1)
        return dict(items)

    json.loads(raw, object_pairs_hook=check)
    return not twice


DUPLICATES = [
    # (path, raw body, the key named): the cheap model last, the dear one first
    (
        "/v1/chat/completions",
        b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}],'
        b' "model": "gpt-4o-mini"}',
        "model",
    ),
    (
        "/v1/chat/completions",
        b'{"model": "gpt-4o", "max_tokens": 100000, "messages": [], "max_tokens": 5}',
        "max_tokens",
    ),
    (
        "/api/chat",
        b'{"model": "llama3.2", "stream": false, "messages": [],'
        b' "options": {"num_predict": 100000, "num_predict": 5}}',
        "num_predict",
    ),
    (
        "/v1/messages",
        b'{"model": "claude-haiku-4-5", "max_tokens": 5,'
        b' "messages": [{"role": "user", "content": "Hi", "role": "assistant"}]}',
        "role",
    ),
    # the same key spelled with an escape
    (
        "/v1/chat/completions",
        b'{"model": "gpt-4o-mini", "messages": [], "m\\u006fdel": "gpt-4o"}',
        "model",
    ),
]


@pytest.mark.parametrize("path,raw,key", DUPLICATES, ids=[f"{d[0]} {d[2]}" for d in DUPLICATES])
def test_a_key_twice_is_refused_naming_it_and_nothing_is_sent(fake, start, path, raw, key):
    guard, gateway = start()
    r = post(gateway, path, raw)
    assert r.status_code == 400
    text = json.dumps(r.json())
    assert f'\\"{key}\\" appears twice' in text
    if path.startswith("/v1/"):
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error"
    assert fake.requests == []
    for model in ("gpt-4o", "gpt-4o-mini", "llama3.2", "claude-haiku-4-5"):
        assert reserved(guard, "alice", model) == 0


def test_the_body_sent_is_the_parsed_request_with_its_fields_in_order(fake, start):
    guard, gateway = start()
    raw = (
        b'{ "x_first" : {"b": 2, "a": [1, 2.5, null]},\n "model":"gpt-\\u0034o",'
        b' "messages":[{"role":"user","content":"Say hello a few times."}],'
        b' "max_tokens": 100, "x_last": "caf\\u00e9" }'
    )
    assert post(gateway, "/v1/chat/completions", raw).status_code == 200
    sent = fake.requests[0].raw
    assert sent != raw  # the parsed request, not the caller's bytes
    assert [k for k, _ in pairs(sent)] == ["x_first", "model", "messages", "max_tokens", "x_last"]
    body = json.loads(sent)
    assert body["model"] == "gpt-4o" and body["x_last"] == "café"
    assert body["x_first"] == {"b": 2, "a": [1, 2.5, None]}
    assert list(body["x_first"]) == ["b", "a"]


def test_output_maximums_that_disagree_are_refused_and_agreeing_ones_both_fitted(fake, start):
    guard, gateway = start(tokens_a_day=2000)
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=ALICE, max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, max_tokens=100000, max_completion_tokens=5
        )
    message = refused.value.body["message"]  # type: ignore[index]
    assert "max_tokens" in message and "max_completion_tokens" in message
    assert fake.requests == [] and reserved(guard, "alice", "gpt-4o") == 0
    # Both set alike: both carry the fitted value (what 2,000 tokens a day leave).
    client.chat.completions.create(
        model="gpt-4o", messages=MESSAGES, max_tokens=100000, max_completion_tokens=100000
    )
    body = fake.requests[0].body
    left = 2000 - prompt_tokens({"model": "gpt-4o", "messages": MESSAGES}, "openai", "gpt-4o")
    assert body["max_tokens"] == body["max_completion_tokens"] == left


# -- the property ---------------------------------------------------------------------------

OUTPUT_FIELDS = ("max_tokens", "max_completion_tokens")
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.text(max_size=8))


@st.composite
def chat_bodies(draw: Any) -> list[tuple[str, Any]]:
    """A chat body as (key, value) pairs, in any order, sometimes with a key twice."""
    items: list[tuple[str, Any]] = [
        ("model", draw(st.sampled_from(["gpt-4o", "gpt-4o-mini"]))),
        ("messages", MESSAGES),
    ]
    for field in (*OUTPUT_FIELDS, "n"):
        if draw(st.booleans()):
            top = 3 if field == "n" else 100_000
            items.append((field, draw(st.integers(1, top))))
    extra = draw(st.dictionaries(st.from_regex(r"x_[a-z]{1,6}", fullmatch=True), JSON_LEAF))
    items += list(extra.items())
    items = draw(st.permutations(items))
    if draw(st.integers(0, 4)) == 0:
        key, value = draw(st.sampled_from(items))
        twin = value + 1 if isinstance(value, int) and not isinstance(value, bool) else "other"
        items.insert(draw(st.integers(0, len(items))), (key, twin))
    return items


def encode(items: list[tuple[str, Any]]) -> bytes:
    return ("{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in items) + "}").encode()


def test_the_upstream_reads_the_model_output_maximum_and_n_admission_used(fake, start, clock):
    # 30,000 tokens a day: with `n` answers, what is left lowers some output maximums.
    guard, gateway = start(tokens_a_day=30_000)
    seen: list[tuple[Recorded, dict[str, int]]] = []

    def at_the_provider(request: Recorded) -> None:
        # What is held while the provider has the call: what admission reserved for.
        holds = {m: reserved(guard, "alice", m) for m in ("gpt-4o", "gpt-4o-mini")}
        seen.append((request, holds))

    fake.on_request = at_the_provider

    @settings(
        max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(items=chat_bodies())
    def check(items: list[tuple[str, Any]]) -> None:
        seen.clear()
        clock.advance(86400)  # each example on a day of its own
        keys = [k for k, _ in items]
        asked_for = dict(items)
        r = post(gateway, "/v1/chat/completions", encode(items))
        twice = len(set(keys)) < len(keys)
        disagree = (
            all(f in asked_for for f in OUTPUT_FIELDS)
            and len({asked_for[f] for f in OUTPUT_FIELDS}) == 2
        )
        if twice or disagree:
            assert r.status_code == 400, r.text
            assert seen == []
            return
        asked = [asked_for[f] for f in OUTPUT_FIELDS if f in asked_for]
        assert r.status_code == 200, r.text
        (request, holds) = seen[0]
        assert no_key_twice(request.raw)
        body = json.loads(request.raw)
        model = body["model"]
        assert model == asked_for["model"]
        maxima = {body[f] for f in OUTPUT_FIELDS if f in body}
        assert len(maxima) == 1, body  # every output maximum the provider reads agrees
        (maximum,) = maxima
        n = body.get("n", 1)
        assert n == asked_for.get("n", 1)
        # Admission reserved the prompt and n times the output maximum sent: each answer may
        # write it, and no more than that fits.
        prompt = prompt_tokens({"model": model, "messages": MESSAGES}, "openai", model)
        assert holds[model] == prompt + n * maximum, (holds, prompt, n, maximum)
        assert holds["gpt-4o-mini" if model == "gpt-4o" else "gpt-4o"] == 0
        assert maximum <= min(asked + [16384])
        if asked and min(asked) <= 16384 and prompt + n * min(asked) <= 30_000:
            # A caller's maximum that fits (the model's and the day's) is sent as given,
            # whatever n.
            assert maximum == min(asked), (asked, n, maximum)

    check()
