"""The quota service (docs/quotas.md): stored quota policies assigned to users, teams, keys and
organizations, compiled into generic rules on a guard.

- `service.py`: `QuotaService`, the contract (check, record, usage, effective_limit, assign and
  policy CRUD) over the guard's engine, and the poll that reloads a change within 1 s;
- `calls.py`: the service's calls as pure functions (units, the call of a subject, decisions);
- `model.py`: subjects, dimensions, windows, limits, and how an assignment compiles into rules;
- `store.py`: where policies and assignments live (the ledger's database, else in memory).

This package is imported on first use of one of its names, not with `usage_guard`: it brings
asyncio, which a process that only admits and bills never needs.
"""

from __future__ import annotations

from .calls import Decision
from .model import QuotaPolicyError
from .service import QuotaService
from .store import PolicyInUse

__all__ = ["Decision", "PolicyInUse", "QuotaPolicyError", "QuotaService"]

# The public names report the path users import them from (in reprs, pickles and docs), not
# the module inside the package that defines them.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
