"""The IETF `RateLimit-Policy` / `RateLimit` fields (draft-ietf-httpapi-ratelimit-headers-12),
parsed back with a Structured Field parser (`http-sfv`): every policy names its unit in `qu`
(a reader takes a policy without one as counting requests), and `usage_guard.http.headers`
writes exactly what the gateway writes for the same view at the same instant."""

from __future__ import annotations

import calendar
import datetime as dt
from typing import Any

import http_sfv
import openai
import pytest
import usage_guard as ug
from doc_blocks import run_by
from fake_provider import FakeProvider
from provider_support import policy
from test_gateway import ALICE, MESSAGES, oai, start  # noqa: F401  (the fixture)
from usage_guard import http

NOW = "2026-12-06T10:00:00Z"


def parsed(value: str) -> dict[str, tuple[Any, dict[str, Any]]]:
    """A field's items by name: `{name: (value, params)}`; raises on a malformed field."""
    field = http_sfv.List()
    field.parse(value.encode())
    return {str(item.value): (item.value, dict(item.params)) for item in field}


def guard_with(**kw: Any) -> ug.Guard:
    return ug.Guard(ug.Policy.from_dict(policy(**kw)), clock=ug.ManualClock(NOW))


def test_every_policy_names_its_unit_and_parses() -> None:
    rules = [{"metric": "requests", "amount": 60, "window": "minute"}]
    guard = guard_with(tokens_a_day=100_000, rules=rules)
    ticket = guard.admit("alice", "gpt-4o", prompt_tokens=100, max_tokens=900)
    ticket.bill(input_tokens=100, output_tokens=900)
    out = http.headers(usage=guard.usage("alice", "gpt-4o"), now=NOW)
    policies = parsed(out["RateLimit-Policy"])
    assert list(policies) == ["requests", "tokens", "cost"]
    assert policies["requests"][1] == {"q": 60, "qu": "requests", "w": 60}
    assert policies["tokens"][1] == {"q": 100_000, "qu": "tokens", "w": 86_400}
    days = calendar.monthrange(2026, 12)[1]
    assert policies["cost"][1] == {"q": 1_000_000_000, "qu": "micro_usd", "w": days * 86_400}
    limits = parsed(out["RateLimit"])
    assert limits["tokens"][1] == {"r": 99_000, "t": 14 * 3600}  # to midnight UTC
    assert limits["requests"][1]["r"] == 59
    assert limits["cost"][1]["r"] < 1_000_000_000
    # The vendor headers stay as they were.
    assert out["x-ratelimit-remaining-tokens"] == "99000"


def test_the_gateway_writes_what_http_headers_writes(fake: FakeProvider, start: Any) -> None:  # noqa: F811
    guard, gateway = start(tokens_a_day=100_000)
    raw = oai(gateway).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    got = raw.headers
    mine = http.headers(usage=guard.usage("alice", "gpt-4o"))
    assert got["ratelimit-policy"] == mine["RateLimit-Policy"]
    gw, py = parsed(got["ratelimit"]), parsed(mine["RateLimit"])
    assert gw.keys() == py.keys() == {"tokens", "cost"}
    # The gateway answers with what was left at admission (the call's hold taken); the view
    # after the bill has the hold's unused part back.
    assert gw["tokens"][1]["r"] < py["tokens"][1]["r"] == 100_000 - 33
    # `t` is counted at each one's own instant: a second apart at most.
    assert abs(gw["tokens"][1]["t"] - py["tokens"][1]["t"]) <= 1


def test_a_refusal_names_the_unit_of_the_rule_that_refused(fake: FakeProvider, start: Any) -> None:  # noqa: F811
    guard, gateway = start(tokens_a_day=10)
    with pytest.raises(openai.RateLimitError) as e:
        oai(gateway).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    headers = e.value.response.headers
    policies = parsed(headers["ratelimit-policy"])
    assert policies["tokens"][1] == {"q": 10, "qu": "tokens", "w": 86_400}
    assert parsed(headers["ratelimit"])["tokens"][1]["r"] == 0


def test_no_view_no_fields_and_bad_rules_say_what_is_wrong() -> None:
    assert "RateLimit" not in http.headers(usage={"rules": []})
    view = {"rules": [{"metric": "tokens", "window": "fortnight", "amount": 1, "left": 1}]}
    with pytest.raises(ValueError, match=r"rules\[0\]\.window.*fortnight"):
        http.headers(usage=view)
    view = {"rules": [{"metric": "tokens", "window": "day", "amount": -1, "left": 1}]}
    with pytest.raises(ValueError, match=r"rules\[0\]\.amount"):
        http.headers(usage=view)
    late = dt.datetime(2026, 12, 7, tzinfo=dt.timezone.utc)
    view = {
        "rules": [{"metric": "tokens", "window": "day", "amount": 5, "left": 2, "resets_at": NOW}]
    }
    assert parsed(http.headers(usage=view, now=late)["RateLimit"])["tokens"][1]["t"] == 0


def test_the_docs_snippet_runs_as_written() -> None:
    (block,) = run_by("docs/providers.md", "gateway/test_ratelimit_fields.py")
    namespace: dict[str, Any] = {}
    exec(compile(block, "docs/providers.md", "exec"), namespace)
    fields = parsed(namespace["headers"]["RateLimit-Policy"])
    assert fields["tokens"][1]["qu"] == "tokens"


def test_an_anchored_window_is_reported_without_w_not_refused() -> None:
    doc = policy(users=("alice",))
    paris = {"kind": "calendar", "unit": "day", "anchor_zone": "Europe/Paris"}
    rule = {"metric": "tokens", "amount": 50, "window": paris}
    doc["limits"]["direct"][0]["rules"] = [rule]
    guard = ug.Guard(ug.Policy.from_dict(doc), clock=ug.ManualClock(NOW))
    view = guard.usage("alice", "gpt-4o")
    assert " from " in view["rules"][0]["window"]
    out = http.headers(usage=view, now=NOW)
    assert parsed(out["RateLimit-Policy"])["tokens"][1] == {"q": 50, "qu": "tokens"}
    assert parsed(out["RateLimit"])["tokens"][1]["r"] == 50
