"""docs/errors.md cannot drift: every row of its tables is checked against the code. Each
refusal kind is produced by a real call (a guard on a manual clock, a store that is down,
`fit`), and its `to_http` in every provider's shape is compared with the row."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import pytest
import usage_guard as ug
import usage_guard.errors as errors
from redis_harness import RedisServer

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "errors.md").read_text()
REASONS_RS = (ROOT / "src" / "guard" / "domain" / "refusal.rs").read_text()
PROVIDERS = ("openai", "anthropic", "ollama")


def table(heading: str) -> list[list[str]]:
    """The rows (cells, stripped) of the first table after `heading`."""
    section = DOC.split(heading, 1)[1]
    rows = []
    for line in section.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if set("".join(cells)) <= set("-: "):
                continue
            rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header


def code(cell: str) -> str:
    """The first `code` span of a cell ("`x` — words" → "x"), or the cell."""
    m = re.search(r"`([^`]*)`", cell)
    return m.group(1) if m else cell


# --- the refusals, each from a real call -----------------------------------------------------

MODELS = {"gpt-5": {"display_name": "GPT-5", "context_window": 400000, "max_output_tokens": 1000}}


def rules(*rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "models": MODELS,
        "limits": {"direct": [{"user": "alice", "model": "gpt-5", "rules": list(rules)}]},
    }


def refusal(call: Callable[[], Any]) -> ug.UsageLimitError:
    with pytest.raises(ug.UsageLimitError) as e:
        call()
    return e.value


def guard(document: dict[str, Any], clock: ug.ManualClock, store: Any = None) -> ug.Guard:
    return ug.Guard(ug.Policy.from_dict(document), store=store, clock=clock)


def rate_limit(clock: ug.ManualClock, far: bool) -> ug.UsageLimitError:
    # 100 tokens a minute used at 14:20:00: at 14:20:59 room is back at 14:21:01 (2 s).
    # 100 an hour: room is back at 15:00:36, 40 minutes on.
    window = "hour" if far else "minute"
    g = guard(rules({"metric": "tokens", "amount": 100, "window": window}), clock)
    g.admit("alice", "gpt-5", prompt_tokens=50, max_tokens=50).bill(50, 50)
    clock.advance(0 if far else 59)
    return refusal(lambda: g.admit("alice", "gpt-5", prompt_tokens=1, max_tokens=1))


def calendar(clock: ug.ManualClock) -> ug.UsageLimitError:
    g = guard(rules({"metric": "tokens", "amount": 100, "window": "day"}), clock)
    g.admit("alice", "gpt-5", prompt_tokens=50, max_tokens=50).bill(50, 50)
    return refusal(lambda: g.admit("alice", "gpt-5", prompt_tokens=1, max_tokens=1))


def concurrency(clock: ug.ManualClock) -> ug.UsageLimitError:
    g = guard(rules({"metric": "concurrency", "amount": 1}), clock)
    running = g.admit("alice", "gpt-5", prompt_tokens=1, max_tokens=1)
    e = refusal(lambda: g.admit("alice", "gpt-5", prompt_tokens=1, max_tokens=1))
    running.release()
    return e


def sliding_does_not_fit(clock: ug.ManualClock) -> ug.UsageLimitError:
    g = guard(rules({"metric": "tokens", "amount": 1000, "window": "minute"}), clock)
    g.admit("alice", "gpt-5", prompt_tokens=500, max_tokens=0).bill(500, 0)
    clock.advance(60)  # the previous minute carries all 500 and decays
    return refusal(lambda: g.admit("alice", "gpt-5", prompt_tokens=600, max_tokens=0))


def calendar_does_not_fit(clock: ug.ManualClock) -> ug.UsageLimitError:
    g = guard(rules({"metric": "tokens", "amount": 1000, "window": "day"}), clock)
    g.admit("alice", "gpt-5", prompt_tokens=500, max_tokens=0).bill(500, 0)
    return refusal(lambda: g.admit("alice", "gpt-5", prompt_tokens=600, max_tokens=0))


def never_fits(clock: ug.ManualClock) -> ug.UsageLimitError:
    g = guard(rules({"metric": "tokens", "amount": 1000, "window": "minute"}), clock)
    return refusal(lambda: g.admit("alice", "gpt-5", prompt_tokens=1001, max_tokens=0))


def ceiling_does_not_fit(clock: ug.ManualClock) -> ug.UsageLimitError:
    ceiling = {"tokens": 300, "max_output_tokens": 1000, "min_output_tokens": 256}
    request = {"model": "gpt-5", "messages": [{"role": "user", "content": "word " * 100}]}
    return refusal(lambda: ug.fit(request, ceiling))


def held(clock: ug.ManualClock) -> ug.UsageLimitError:
    # A call in progress holds 900 of the day's 1,000 tokens; nothing is used yet.
    g = guard(rules({"metric": "tokens", "amount": 1000, "window": "day"}), clock)
    running = g.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=800)
    e = refusal(lambda: g.admit("alice", "gpt-5", prompt_tokens=1, max_tokens=200))
    running.release()
    return e


def unavailable(clock: ug.ManualClock) -> ug.UsageLimitError:
    store = ug.RedisStore("redis://127.0.0.1:1")
    g = guard(rules({"metric": "tokens", "amount": 1000, "window": "day"}), clock, store)
    return refusal(lambda: g.admit("alice", "gpt-5", prompt_tokens=1, max_tokens=1))


def recovering(clock: ug.ManualClock) -> ug.UsageLimitError:
    # A cost rule on Redis; the counter it wrote is deleted: the epoch fence refuses.
    priced = {"gpt-5": {**MODELS["gpt-5"], "prices": {"input": 1.0, "output": 1.0}}}
    document = {**rules({"metric": "cost", "amount": 1.0, "window": "day"}), "models": priced}
    server = RedisServer()
    try:
        g = guard(document, clock, ug.RedisStore(server.url, "doc"))
        # wait=True: the bill lands before the counters are lost (queued, it could land after
        # and recreate the key it adds to).
        g.admit("alice", "gpt-5", prompt_tokens=1, max_tokens=1).bill(1, 1, wait=True)
        for key in server.cli("--scan", "--pattern", "{doc}:c:*").split():
            server.cli("del", key)
        return refusal(lambda: g.admit("alice", "gpt-5", prompt_tokens=1, max_tokens=1))
    finally:
        server.stop()


def context_window(clock: ug.ManualClock) -> ug.UsageLimitError:
    g = guard(rules({"metric": "tokens", "amount": 1000, "window": "day"}), clock)
    return refusal(lambda: g.admit("alice", "gpt-5", prompt_tokens=450_000))


def model_not_found(clock: ug.ManualClock) -> ug.UsageLimitError:
    g = guard({"settings": {"unknown_models": "refuse"}, "models": MODELS}, clock)
    return refusal(lambda: g.admit("alice", "gpt-9", prompt_tokens=1))


KINDS: dict[str, Callable[[ug.ManualClock], ug.UsageLimitError]] = {
    "rate-limit": lambda c: rate_limit(c, far=False),
    "rate-limit-far": lambda c: rate_limit(c, far=True),
    "calendar": calendar,
    "concurrency": concurrency,
    "sliding-does-not-fit": sliding_does_not_fit,
    "calendar-does-not-fit": calendar_does_not_fit,
    "never-fits": never_fits,
    "ceiling-does-not-fit": ceiling_does_not_fit,
    "held": held,
    "unavailable": unavailable,
    "recovering": recovering,
    "context-window": context_window,
    "model-not-found": model_not_found,
}

REFUSALS = table("## Refusals over HTTP")
COMING = {code(row[0]) for row in REFUSALS if "*(coming" in row[0]}


def test_every_kind_has_a_row_and_every_row_a_kind() -> None:
    documented = {code(row[0]) for row in REFUSALS}
    assert documented - COMING == set(KINDS)


def test_every_reason_code_is_documented() -> None:
    codes = set(re.findall(r'Reason::\w+ => "([A-Z_]+)"', REASONS_RS))
    assert "USAGE_LIMIT_REACHED" in codes
    assert codes <= {code(row[2]) for row in REFUSALS}
    documented = {
        span for row in table("## Exceptions") for span in re.findall(r"`([^`]*)`", row[3])
    }
    assert codes <= documented


def headers_of(cell: str) -> dict[str, str]:
    """`retry-after`, `x-should-retry: false` → {"retry-after": "*", "x-should-retry": "false"}."""
    out = {}
    for span in re.findall(r"`([^`]*)`", cell):
        name, _, value = span.partition(": ")
        out[name] = value or "*"
    return out


@pytest.mark.parametrize("row", REFUSALS, ids=[code(r[0]) for r in REFUSALS])
def test_each_row_is_what_the_code_answers(row: list[str]) -> None:
    kind, exception, reason, status, headers, openai_cell, anthropic, ollama = row
    kind = code(kind)
    if kind in COMING:
        pytest.skip(f"{kind}: documented as coming")
    error = KINDS[kind](ug.ManualClock("2026-11-30T14:20:00Z"))
    assert type(error).__name__ == code(exception)
    assert error.reason == code(reason)
    if kind == "rate-limit":
        assert 1 <= (error.retry_after or 0) <= 60
    if kind == "rate-limit-far":
        assert (error.retry_after or 0) > 60
    want_headers = headers_of(headers)
    openai_type, openai_code, param = (code(c.strip()) for c in openai_cell.split(" / "))
    for provider in PROVIDERS:
        got_status, got_headers, body = error.to_http(provider)  # type: ignore[arg-type]
        assert got_status == int(status), provider
        assert got_headers.pop("content-type") == "application/json"
        assert set(got_headers) == set(want_headers), (provider, got_headers)
        for name, value in want_headers.items():
            if value == "*":
                assert got_headers[name] == str(max(1, error.retry_after or 0))
            else:
                assert got_headers[name] == value
        if provider == "openai":
            assert body == {
                "error": {
                    "message": str(error),
                    "type": openai_type,
                    "code": openai_code,
                    "param": None if param == "null" else param,
                }
            }
        elif provider == "anthropic":
            assert body == {
                "type": "error",
                "error": {"type": code(anthropic), "message": str(error), "code": openai_code},
            }
        else:
            assert code(ollama) == '{"error": message}'
            assert body == {"error": str(error)}


def test_every_exception_is_documented_with_its_base() -> None:
    rows = {code(r[0]): r for r in table("## Exceptions")}
    names = set(errors.__all__) | {"LedgerError", "InternalError"}
    assert set(rows) == names
    for name, row in rows.items():
        cls = getattr(ug, name)
        base = code(row[1])
        assert base in [b.__name__ for b in cls.__mro__[1:]], (name, base)
        assert getattr(errors, name, cls) is cls
