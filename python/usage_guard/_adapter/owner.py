"""What one guarded call needs from the client that makes it (`flow.GuardedClient`), as a
`Protocol`: `call` and `ladder` depend on this, not on `flow`, so the modules import in one
direction (owner ← call ← ladder ← flow)."""

from __future__ import annotations

from typing import Optional, Protocol

from .. import _core


class Owner(Protocol):
    """The guarded client's state a call reads: the guard, the default user, the fallback
    ladder (None: none) and the name the provider's key is tracked under."""

    _guard: _core.Guard
    _guard_user: Optional[str]
    _fallbacks: Optional[list[str]]
    _credential: str
