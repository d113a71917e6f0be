"""Headers, both ways, through the real `openai` and `anthropic` SDKs: nothing of the
operator's account reaches a caller (upstream cookies, organization, project, the account's
`x-ratelimit-*` / `anthropic-ratelimit-*`; the rate-limit headers a caller sees are the
gateway's own), the caller's account-choosing headers (`OpenAI-Organization`,
`OpenAI-Project`, `anthropic-beta`) reach the provider only for a key allowed them, and a
provider refusing the operator's credential (401/403) is a 502
`provider_credentials_rejected` with no key text, logged for the operator."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
import usage_guard as ug
from fake_provider import FakeProvider
from provider_support import policy

ALICE, TRUSTED = "sk-alice-headers", "sk-trusted-headers"
MESSAGES = [{"role": "user", "content": "Say hello."}]
# What an upstream answer carries of the operator's account, and what a caller may see.
LEAKY = {
    "set-cookie": "__cf_bm=operator-session; Path=/; HttpOnly",
    "openai-organization": "org-operator",
    "openai-project": "proj_operator",
    "x-ratelimit-limit-requests": "10000",
    "x-ratelimit-remaining-tokens": "1999",
    "anthropic-ratelimit-requests-remaining": "4999",
    "anthropic-organization-id": "operator-org-uuid",
    "openai-processing-ms": "12",
}
PASSING = {"x-request-id": "req_upstream_1", "request-id": "req_ant_1"}


def headers_policy(fake: FakeProvider, trusted: bool = False) -> dict[str, Any]:
    """Alice's key, and with `trusted` a key allowed to pick the organization and betas."""
    doc = policy(users=("alice", "trusted"))
    doc["providers"] = {p: {"base_url": fake.url} for p in ("openai", "anthropic")}
    keys: dict[str, Any] = {"alice": {"key": ALICE, "principal": "alice"}}
    if trusted:
        keys["trusted"] = {
            "key": TRUSTED,
            "principal": "trusted",
            "pass_headers": ["OpenAI-Organization", "anthropic-beta"],
        }
    doc["gateway"] = {"keys": keys}
    return doc


@pytest.fixture
def start(fake: FakeProvider) -> Iterator[Any]:
    running: list[ug.Gateway] = []

    def make(trusted: bool = False) -> ug.Gateway:
        guard = ug.Guard(ug.Policy.from_dict(headers_policy(fake, trusted)))
        running.append(ug.Gateway(guard, "127.0.0.1:0"))
        return running[-1]

    yield make
    for g in running:
        g.shutdown()
        assert g.wait(10)


def oai(gateway: ug.Gateway, key: str = ALICE, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0, **kw)


def claude(gateway: ug.Gateway, key: str = ALICE) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0)


def assert_nothing_of_the_operator(headers: Any, shape: str) -> None:
    names = {k.lower() for k in headers.keys()}
    assert not names & {"set-cookie", "openai-organization", "openai-project"}, names
    assert "anthropic-organization-id" not in names and "openai-processing-ms" not in names
    # The gateway's own rate-limit headers only: its rules count tokens, not requests.
    assert "x-ratelimit-limit-requests" not in names
    assert "anthropic-ratelimit-requests-remaining" not in names
    if shape == "openai":
        assert headers["x-ratelimit-limit-tokens"] == "1000000"
        assert headers["x-ratelimit-remaining-tokens"] != "1999"
    else:
        assert headers["anthropic-ratelimit-tokens-limit"] == "1000000"


def test_nothing_of_the_operator_s_account_reaches_a_caller(fake, start):
    gateway = start()
    fake.extra_headers = {**LEAKY, **PASSING}
    raw = oai(gateway).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=MESSAGES, max_tokens=20
    )
    assert_nothing_of_the_operator(raw.headers, "openai")
    assert raw.headers["x-request-id"] == "req_upstream_1"
    assert raw.headers["content-type"].startswith("application/json")
    assert raw.parse().choices[0].message.content
    with oai(gateway).chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=MESSAGES, max_tokens=20, stream=True
    ) as streamed:
        assert_nothing_of_the_operator(streamed.headers, "openai")
        assert streamed.headers["content-type"].startswith("text/event-stream")
        assert "hello" in streamed.read().decode()
    message = claude(gateway).messages.with_raw_response.create(
        model="claude-haiku-4-5", max_tokens=20, messages=MESSAGES
    )
    assert_nothing_of_the_operator(message.headers, "anthropic")
    assert message.headers["request-id"] == "req_ant_1"
    # An upstream error passed through keeps its content and when to retry, nothing else.
    fake.script = [(429, {"retry-after": "7"}, {"error": {"code": "rate_limit_exceeded"}})]
    with pytest.raises(openai.RateLimitError) as limited:
        oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=20)
    assert limited.value.response.headers["retry-after"] == "7"
    assert_names = {k.lower() for k in limited.value.response.headers.keys()}
    assert not assert_names & {"set-cookie", "openai-organization", "x-ratelimit-limit-requests"}


CHOSEN = {"organization": "org-caller", "project": "proj-caller"}
BETA = {"anthropic-beta": "context-1m-2025-08-07"}


def call_both(
    gateway: ug.Gateway, fake: FakeProvider, key: str
) -> tuple[dict[str, str], dict[str, str]]:
    """One OpenAI and one Anthropic call picking an organization, a project and a beta; the
    headers the provider got for each."""
    oai(gateway, key, **CHOSEN).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, max_tokens=20
    )
    claude(gateway, key).messages.create(
        model="claude-haiku-4-5", max_tokens=20, messages=MESSAGES, extra_headers=BETA
    )
    openai_sent, anthropic_sent = (r.headers for r in fake.requests[-2:])
    for sent in (openai_sent, anthropic_sent):
        assert key not in json.dumps(sent)  # the caller's key never goes upstream
    return openai_sent, anthropic_sent


def test_a_caller_cannot_pick_the_operator_s_organization_project_or_betas(fake, start):
    gateway = start()
    openai_sent, anthropic_sent = call_both(gateway, fake, ALICE)
    assert "openai-organization" not in openai_sent and "openai-project" not in openai_sent
    assert "anthropic-beta" not in anthropic_sent
    assert anthropic_sent["anthropic-version"]  # the API version always passes


def test_a_key_allowed_them_passes_the_headers_it_lists(fake, start):
    gateway = start(trusted=True)
    openai_sent, anthropic_sent = call_both(gateway, fake, TRUSTED)
    assert openai_sent["openai-organization"] == "org-caller"
    assert "openai-project" not in openai_sent  # not in that key's pass_headers
    assert anthropic_sent["anthropic-beta"] == BETA["anthropic-beta"]


def test_a_pass_headers_entry_outside_the_list_is_refused_naming_it(fake):
    doc = headers_policy(fake)
    doc["gateway"]["keys"]["alice"]["pass_headers"] = ["OpenAI-Project", "authorization"]
    with pytest.raises(ug.PolicyError) as refused:
        ug.Policy.from_dict(doc)
    text = str(refused.value)
    assert "gateway.keys.alice.pass_headers[1]" in text and "openai-organization" in text


REJECTED = {
    "openai": (
        401,
        {
            "error": {
                "message": "Incorrect API key provided: sk-proj-****wxyz.",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        },
    ),
    "anthropic": (
        403,
        {
            "type": "error",
            "error": {"type": "permission_error", "message": "key sk-ant-****wxyz is disabled"},
        },
    ),
}


def test_a_provider_refusing_the_operator_s_key_is_a_502_without_key_text(fake, start, caplog):
    gateway = start()
    caplog.set_level("INFO", logger="usage_guard")
    fake.extra_headers = LEAKY
    status, body = REJECTED["openai"]
    fake.script = [(status, {}, body)]
    with pytest.raises(openai.InternalServerError) as raised:
        oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=20)
    answer = raised.value.response
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == "provider_credentials_rejected"
    assert "wxyz" not in answer.text and "sk-" not in answer.text
    assert "set-cookie" not in answer.headers
    status, body = REJECTED["anthropic"]
    fake.script = [(status, {}, body)]
    with pytest.raises(anthropic.InternalServerError) as refused:
        claude(gateway).messages.create(model="claude-haiku-4-5", max_tokens=20, messages=MESSAGES)
    answer = refused.value.response
    assert answer.status_code == 502
    assert answer.json()["error"]["type"] == "api_error"
    assert "wxyz" not in answer.text and "sk-" not in answer.text
    logged = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("openai upstream refused the credential" in m and "401" in m for m in logged)
    assert any("anthropic upstream refused the credential" in m and "403" in m for m in logged)
    assert not any("wxyz" in m for m in logged)


RATE_LIMITED = (
    "Rate limit reached for gpt-4o in organization org-OPERATOR123 on tokens per min (TPM): "
    "Limit 30000, Used 29000, Requested 2000. Please try again in 2s."
)
UPSTREAM_KEY = "sk-UPSTREAM-SECRET-0123456789"


def test_a_provider_error_keeps_its_status_type_and_code_not_the_operator_s_words(
    fake, monkeypatch
):
    """A 429 in OpenAI's wording (the operator's organization, its account's limit and use)
    and a 5xx echoing the operator's key: the caller gets the status, Retry-After, the error
    type and code in the endpoint's shape, none of the organization, the figures or the key;
    a 400's own message is passed on, its ids redacted."""
    monkeypatch.setenv("UG_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    doc = headers_policy(fake)
    for p in doc["providers"].values():
        p["api_key_env"] = "UG_TEST_UPSTREAM_KEY"
    guard = ug.Guard(ug.Policy.from_dict(doc))
    gateway = ug.Gateway(guard, "127.0.0.1:0")
    try:
        fake.script = [
            (
                429,
                {"retry-after": "1", "openai-organization": "org-OPERATOR123"},
                {
                    "error": {
                        "message": RATE_LIMITED,
                        "type": "tokens",
                        "param": None,
                        "code": "rate_limit_exceeded",
                    }
                },
            )
        ]
        with pytest.raises(openai.RateLimitError) as limited:
            oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=20)
        answer = limited.value.response
        assert answer.headers["retry-after"] == "1"
        error = answer.json()["error"]
        assert (error["type"], error["code"]) == ("tokens", "rate_limit_exceeded")
        for leak in ("org-OPERATOR123", "30000", "29000", "organization"):
            assert leak not in answer.text, answer.text
        time.sleep(1.2)  # past the credential's cooldown the 429 asked for
        echoed = f"proxy error: upstream rejected header Authorization: Bearer {UPSTREAM_KEY}"
        fake.script = [(500, {}, {"error": {"message": echoed}})]
        with pytest.raises(openai.InternalServerError) as failed:
            oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=20)
        assert failed.value.response.status_code == 500
        assert "SECRET" not in failed.value.response.text
        fake.script = [
            (529, {}, {"type": "error", "error": {"type": "overloaded_error", "message": echoed}})
        ]
        with pytest.raises(anthropic.APIStatusError) as overloaded:
            claude(gateway).messages.create(
                model="claude-haiku-4-5", max_tokens=20, messages=MESSAGES
            )
        assert overloaded.value.response.status_code == 529
        assert overloaded.value.response.json()["error"]["type"] == "overloaded_error"
        assert "SECRET" not in overloaded.value.response.text
        refused = "messages.0.role: unknown role 'robot' (request by org-OPERATOR123)"
        fake.script = [
            (
                400,
                {},
                {
                    "error": {
                        "message": refused,
                        "type": "invalid_request_error",
                        "param": "messages.0.role",
                        "code": None,
                    }
                },
            )
        ]
        with pytest.raises(openai.BadRequestError) as bad:
            oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES, max_tokens=20)
        error = bad.value.response.json()["error"]
        assert error["param"] == "messages.0.role"
        assert "unknown role 'robot'" in error["message"]
        assert "OPERATOR123" not in bad.value.response.text
    finally:
        gateway.shutdown()
        assert gateway.wait(10)
