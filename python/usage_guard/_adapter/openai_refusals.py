"""The OpenAI SDK calls that make a model generate where the guard cannot meter them, refused
on a guarded client (a TypeError naming the call and what to call instead; nothing is sent):

- a Responses resource's `compact` (also its raw and streaming twins): a compaction is a
  model call whose tokens no guarded call sees;
- a Responses resource's `connect`: a WebSocket session whose responses are created by the
  events sent over it, unseen;
- `batches.create` (also its twins): a batch job runs its requests later, unseen.

The reads (`retrieve`, `list`, `cancel`, `delete`, `input_tokens`, ...) pass."""

from __future__ import annotations

from typing import Any

from .flow import Proxy
from .twins import refused

__all__ = ["guarded_batches", "refuse_unmetered"]

_TWINS = ("", "with_raw_response.", "with_streaming_response.")


def refuse_unmetered(path: str, resource: Proxy, raw: Proxy, streaming: Proxy) -> None:
    """Refuses `compact` (on `resource` and its `raw` and `streaming` twins) and `connect` of
    the guarded Responses resource found at `path` ("responses", "beta.responses"), where the
    SDK has them."""
    create = f"{path}.create"
    for proxy, twin in zip((resource, raw, streaming), _TWINS):
        if hasattr(proxy, "compact"):
            proxy.__dict__["compact"] = refused(
                f"{path}.{twin}compact (a compaction generates tokens)",
                f"carry the conversation on with {create}, which is metered",
            )
    if hasattr(resource, "connect"):
        resource.__dict__["connect"] = refused(
            f"{path}.connect (a WebSocket session)",
            f"call {create}(stream=True), which is metered",
        )


def guarded_batches(client: Any) -> tuple[Proxy, Proxy, Proxy]:
    """The SDK client's `batches` with `create` refused, and its raw and streaming twins
    likewise: (batches, with_raw_response, with_streaming_response)."""
    how = (
        "send the requests one by one through the guarded client (chat.completions.create, "
        "responses.create, embeddings.create, ...)"
    )
    batches = client.batches
    twins = [
        Proxy(
            getattr(batches, name),
            create=refused(f"batches.{name}.create (a batch job, run later, unseen)", how),
        )
        for name in ("with_raw_response", "with_streaming_response")
    ]
    guarded = Proxy(
        batches,
        create=refused("batches.create (a batch job, run later, unseen)", how),
        with_raw_response=twins[0],
        with_streaming_response=twins[1],
    )
    return guarded, twins[0], twins[1]
