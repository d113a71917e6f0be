"""`--limits` of `usage-guard quota create` / `update`: quotas.md's limits JSON, inline or
from a file, read strictly (a key given twice in one object is an error)."""

from __future__ import annotations

import json
from typing import Any, Callable, Optional


def read_limits(text: str) -> tuple[Any, Optional[str], Optional[str]]:
    """`--limits`: quotas.md's limits JSON, inline or `@file.json`; a file may also hold the
    document `init --preset` writes (`{"name", "limits", "description"?}`). Returns the
    limits and the document's name and description (None when absent)."""
    source = "--limits"
    if text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ValueError(f"--limits: cannot read {path!r} ({e.strerror})") from None
        source = f"--limits {path!r}"
    try:
        value = json.loads(text, object_pairs_hook=_no_key_twice(source))
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{source}: not JSON ({e}); accepted: a JSON object of dimension to "
            '{"limit", "window"}, or @file.json'
        ) from None
    # A dimension is a dotted name, so a top-level "limits" key means the whole document.
    if isinstance(value, dict) and "limits" in value and set(value) <= DOCUMENT_KEYS:
        return value["limits"], value.get("name"), value.get("description")
    return value, None, None


DOCUMENT_KEYS = {"name", "limits", "description"}


def _no_key_twice(source: str) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A JSON object hook refusing a key given twice in one object (json keeps the last one
    silently: a dimension's second limit would replace its first unseen)."""

    def table(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ValueError(f"{source}: {key!r} is given twice in one JSON object")
            out[key] = value
        return out

    return table
