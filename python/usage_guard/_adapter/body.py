"""The request as the SDK will send it. The `openai` and `anthropic` SDKs merge a call's
`extra_body` over the JSON body its keywords make (key by key, `extra_body` winning, an `omit`
value deleting the key), so admission reads that merged body, never the keywords alone: an
output maximum, `n`, a thinking budget or a prompt field sent in `extra_body` is counted and
fitted like the keyword. The fitted value is sent where the caller gave the key (in
`extra_body` when it was there), and a key given both ways with different values is refused,
since only one of them can be what the provider receives."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

# SDK-only keyword arguments: they configure the HTTP call, they are not the request (the
# JSON of `extra_body` is merged into it: `sent_request`).
SDK_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})


def not_given(value: Any) -> bool:
    # openai.NOT_GIVEN / anthropic.NOT_GIVEN / omit sentinels, without importing the SDKs.
    return type(value).__name__ in ("NotGiven", "Omit")


def jsonable(value: Any) -> Any:
    """The request as plain JSON values (SDK models dumped, bytes as base64, sentinels dropped)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items() if not not_given(v)}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, type):  # e.g. a pydantic class as `response_format`
        return value.__name__
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(exclude_none=True))
        except Exception:
            return str(value)
    if hasattr(value, "keys"):
        return {str(k): jsonable(value[k]) for k in value.keys()}
    return str(value)


def _extra_body(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's own copy of its `extra_body` (empty when it gave none)."""
    extra = kwargs.get("extra_body")
    if extra is None or not_given(extra):
        return {}
    if not isinstance(extra, Mapping):
        raise TypeError(
            f"extra_body: {extra!r} is a {type(extra).__name__}; the SDK merges a dict of "
            "JSON fields into the request body"
        )
    return dict(extra)


def _refuse_conflicts(kwargs: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        given = kwargs.get(key)
        if key in SDK_OPTIONS or given is None or not_given(given):
            continue
        sent = "omit (the key deleted)" if not_given(value) else repr(value)
        if not_given(value) or jsonable(value) != jsonable(given):
            raise ValueError(
                f"extra_body.{key}: {sent} conflicts with the {key}= keyword ({given!r}); "
                "the SDK sends the extra_body value, so give the key once (the keyword, "
                "or the same value in both)"
            )


def sent_request(kwargs: dict[str, Any], keywords: tuple[str, ...]) -> dict[str, Any]:
    """The JSON body the SDK will send for the keyword arguments `kwargs` (changed in place):
    the keys of `keywords` found in `extra_body` (`stream`, `stream_options`: the guard's
    stream plumbing reads them from the keywords) are moved to the keywords, and
    `kwargs["extra_body"]` becomes the call's own copy, which `place_fitted` may write into.
    Raises ValueError when a key is given as a keyword and in `extra_body` with different
    values, TypeError when `extra_body` is not a mapping."""
    extra = _extra_body(kwargs)
    _refuse_conflicts(kwargs, extra)
    for key in keywords:
        if key in extra:
            value = extra.pop(key)
            if not not_given(value):
                kwargs[key] = value
    if extra or isinstance(kwargs.get("extra_body"), Mapping):
        kwargs["extra_body"] = extra  # the call's own copy (None and NOT_GIVEN left as given)
    request = {
        k: jsonable(v) for k, v in kwargs.items() if k not in SDK_OPTIONS and not not_given(v)
    }
    for key, value in extra.items():
        if not_given(value):
            request.pop(key, None)
        else:
            request[key] = jsonable(value)
    return request


def place_fitted(kwargs: dict[str, Any], fitted: dict[str, Any]) -> None:
    """Sends the keys admission fitted: each where the caller gave it (`extra_body`, whose
    value would otherwise replace the keyword's), else as a keyword."""
    extra = kwargs.get("extra_body")
    for key, value in fitted.items():
        if isinstance(extra, dict) and key in extra:
            extra[key] = value
        else:
            kwargs[key] = value
