"""The provider adapters: SDK and stream plumbing only. Admission counts the prompt once and
fits the request in the core (where each provider keeps its fields lives there, one file per
provider); the adapters send `ticket.fitted`, read usage from SDK objects and streams, and
bill. `call` holds the steps of one call, `flow` the sync/async drivers and stream wrappers,
and one module per provider SDK describes its methods."""

from .call import Api, Call, StreamState, Usage
from .flow import AsyncGuardedStream, GuardedClient, GuardedStream, Proxy

__all__ = [
    "Api",
    "AsyncGuardedStream",
    "Call",
    "GuardedClient",
    "GuardedStream",
    "Proxy",
    "StreamState",
    "Usage",
]
