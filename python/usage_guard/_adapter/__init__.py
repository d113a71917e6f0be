"""The provider adapters: SDK and stream plumbing only. Admission counts the prompt once and
fits the request in the core (where each provider keeps its fields lives there, one file per
provider, and so does reading the reported usage: `_core.reported_usage`); the adapters send
`ticket.fitted`, hand the core the response or stream event that carries the usage, and bill.
`owner` says what a call reads from its client, `call` holds the steps of one call, `body` the
request as the SDK sends it (`extra_body` merged in), `flow` the sync/async drivers and client
proxies, `streams` the stream wrappers, `sealed` a stream's HTTP response without its body, and
one module per provider SDK describes its methods (`openai_streams` OpenAI's other ways to
stream)."""

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
