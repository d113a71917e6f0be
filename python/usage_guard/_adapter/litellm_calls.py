"""What a LiteLLM call is metered as: the call types `usage_guard.litellm` meters (a refusal
for the others), the request admission reads for each (with what it sent in `extra_body`),
where the fitted keys go, and the bill of the usage LiteLLM reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..types import Provider
from .body import jsonable, place_fitted
from .call import g

# The LiteLLM call types metered (each also as its async twin, with a leading "a"): the core's
# provider word for the request's shape, and the request fields admission reads (the prompt,
# the output maximum, the answer count, the reasoning). Every other call type is refused.
_METERED: dict[str, tuple[Provider, tuple[str, ...]]] = {
    "completion": (
        "openai",
        ("messages", "tools", "functions", "max_tokens", "max_completion_tokens", "n"),
    ),
    "text_completion": ("openai.completions", ("prompt", "suffix", "max_tokens", "n", "best_of")),
    "responses": (
        "openai.responses",
        ("input", "instructions", "tools", "max_output_tokens", "reasoning"),
    ),
    "embedding": ("openai.embeddings", ("input",)),
}


def call_type_name(value: Any) -> str:
    return str(getattr(value, "value", value) or "")


def kind_of(call_type: Any) -> str:
    """The metered kind of a LiteLLM call type (`aresponses` → `responses`); refuses (raises
    TypeError) one the handler does not meter, before it is sent."""
    name = call_type_name(call_type)
    for kind in (name, name[1:] if name.startswith("a") else name):
        if kind in _METERED:
            return kind
    metered = ", ".join(f"{k} / a{k}" for k in _METERED)
    raise TypeError(
        f"call_type: LiteLLM's {name!r} calls are not metered by usage_guard.litellm, so "
        f"they are refused while a UsageGuardHandler is in litellm.callbacks; metered: "
        f"{metered}"
    )


@dataclass
class Admission:
    """What a LiteLLM call is admitted with, and the keys sent even when admission fits none."""

    provider: Provider  # the core's provider word for the request's shape
    request: dict[str, Any]
    implied: dict[str, Any] = field(default_factory=dict)


# LiteLLM's text completion writes at most 16 tokens when it is given no `max_tokens` (its
# docs, and the completions API's default), which the core reserves; LiteLLM sends a chat
# model's text completion as a chat completion, which has no such default: it is sent.
_TEXT_DEFAULT_MAX_TOKENS = 16


def _from_extra_body(request: dict[str, Any], kwargs: dict[str, Any], fields: Any) -> None:
    """Reads the fields sent in `extra_body` (merged over the request by the SDK LiteLLM
    calls) into `request`; refuses a conflict, and `stream` there."""
    extra = kwargs.get("extra_body")
    if not isinstance(extra, dict):
        return
    if "stream" in extra:
        raise ValueError(
            f"extra_body.stream: {extra['stream']!r} is not accepted; pass stream= to "
            "LiteLLM, whose stream reports the usage the guard bills"
        )
    for key in (*fields, "background"):
        if key not in extra:
            continue
        if key in request and request[key] != jsonable(extra[key]):
            raise ValueError(
                f"extra_body.{key}: {extra[key]!r} conflicts with {key}= ({kwargs[key]!r}); "
                "give the key once"
            )
        request[key] = jsonable(extra[key])


def admission_of(kind: str, kwargs: dict[str, Any]) -> Admission:
    """How a call of `kind` is admitted: the fields it reads, from the call's arguments and
    its `extra_body`. Refuses a background response (ValueError)."""
    provider, fields = _METERED[kind]
    request = {k: jsonable(kwargs[k]) for k in fields if kwargs.get(k) is not None}
    if kind == "responses" and kwargs.get("background"):
        request["background"] = kwargs["background"]
    _from_extra_body(request, kwargs, fields)
    if request.pop("background", None):
        raise ValueError(
            "background: True is not accepted: a background response is produced after the "
            "call returns, where the guard can neither bill its output nor hold its "
            "reservation; call without background"
        )
    implied: dict[str, Any] = {}
    if kind == "text_completion" and "max_tokens" not in request:
        implied["max_tokens"] = _TEXT_DEFAULT_MAX_TOKENS
    return Admission(provider, request, implied)


def fit(kwargs: dict[str, Any], admission: Admission, fitted: dict[str, Any]) -> None:
    """Writes the fitted keys (and the implied ones) into the call's arguments: into
    `extra_body` for a key sent there, on a copy of it (the caller's dict is left as given)."""
    if isinstance(kwargs.get("extra_body"), dict):
        kwargs["extra_body"] = dict(kwargs["extra_body"])
    place_fitted(kwargs, {**admission.implied, **fitted})


def _count(carrier: Any, *names: str) -> int:
    for name in names:
        value = g(carrier, name)
        if isinstance(value, (int, float)) and value > 0:
            return int(value)
    return 0


def usage_of(response: Any) -> dict[str, int]:
    """The bill of LiteLLM's answer: its OpenAI-shaped usage (`prompt_tokens`, ...), or the
    Responses API's (`input_tokens`, ...), as an object or a dict."""
    usage = g(response, "usage")
    prompt = _count(usage, "prompt_tokens", "input_tokens")
    output = _count(usage, "completion_tokens", "output_tokens")
    cached = _count(g(usage, "prompt_tokens_details"), "cached_tokens") or _count(
        g(usage, "input_tokens_details"), "cached_tokens"
    )
    reasoning = _count(g(usage, "completion_tokens_details"), "reasoning_tokens") or _count(
        g(usage, "output_tokens_details"), "reasoning_tokens"
    )
    return {
        "input_tokens": prompt,
        "output_tokens": output,
        "cached_input_tokens": min(cached, prompt),
        "reasoning_tokens": min(reasoning, output),
    }


def call_id_of(kwargs: dict[str, Any]) -> str:
    """The LiteLLM call id a call's hold is kept under until its success or failure event."""
    found = kwargs.get("litellm_call_id")
    if not found:
        raise TypeError(
            "litellm_call_id: the call has none; usage_guard.litellm bills a call by its "
            "LiteLLM call id, so a call without one is refused"
        )
    return str(found)
