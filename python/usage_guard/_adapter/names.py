"""The typing-only names of the provider stubs (`usage_guard/openai.pyi` and its kin: the
SDK's answer types with the guard's attributes, the guarded resources and streams) as run-time
objects, so annotations that are evaluated still resolve: each is the class that object is at
run time (the SDK's answer class, the stream proxy, `Proxy`), imported on first use."""

from __future__ import annotations

import importlib
from typing import Any, Callable

# name -> (module, attribute): the run-time class of each stub-only name.
Table = dict[str, tuple[str, str]]

FLOW = "usage_guard._adapter.flow"
STREAMS: Table = {
    "GuardedStream": (FLOW, "GuardedStream"),
    "GuardedAsyncStream": (FLOW, "AsyncGuardedStream"),
}


def resources(*names: str) -> Table:
    """Guarded resources (`client.chat.completions`, ...): `Proxy` objects at run time."""
    return {name: (FLOW, "Proxy") for name in names}


def module_getattr(module: str, table: Table) -> Callable[[str], Any]:
    """A module `__getattr__` that resolves the names of `table`, once each."""

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, attribute = table[name]
        value = getattr(importlib.import_module(where), attribute)
        setattr(importlib.import_module(module), name, value)
        return value

    return __getattr__
