"""`QuotaService(guard)`: the quota contract of quotas.md (check, record, usage,
effective_limit, assign and policy CRUD) over the guard's engine (docs/quotas.md).

Policies and assignments are rows in the ledger's database (`store.py`); the service
compiles the assignments in force into generic rules (`quota <dimension> <type>:<id>`) added
after the file policy's own, so admission, `check` and `record` all count the same counters
in the guard's store. A change bumps a version counter in the store; every service on that
store polls it (four times a second) and reloads, so every guard sees a change within 1 s.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import uuid
import weakref
from typing import TYPE_CHECKING, Any, Optional

from .. import _core
from ..errors import PolicyError
from .calls import (
    Decision,
    Instant,
    call_of,
    decide,
    disabled_by,
    effective,
    instant_ms,
    record_spec,
    units_of,
    usage_view,
)
from .calls import poll as _poll_loop
from .model import (
    VERSION_ENDPOINT,
    VERSION_RULE,
    Subject,
    compile_rules,
    enforceable,
)
from .store import Database, QuotaStore

if TYPE_CHECKING:
    from ..types import EffectiveLimit, QuotaUsage

LOG = logging.getLogger("usage_guard.quota")
POLL_SECONDS = 0.25


class QuotaService:
    """The quota service of `guard` (one per guard). `ledger` / `database`: where policies are
    stored (default: the guard's ledger, else an in-memory database of this process);
    `clock`: the guard's clock when it is a `ManualClock` (for `effective_from`); `warn_at`:
    the soft threshold of every quota (None: none)."""

    def __init__(
        self,
        guard: _core.Guard,
        *,
        ledger: Any = None,
        database: Optional[Database] = None,
        clock: Optional[_core.ManualClock] = None,
        warn_at: Optional[float] = 0.8,
        poll: bool = True,
    ) -> None:
        self.guard = guard
        ledger = ledger if ledger is not None else guard.ledger
        if database is None and ledger is not None:
            database = _core.QuotaDatabase(ledger)
        self.store = QuotaStore(database)
        self.clock = clock
        self.warn_at = warn_at
        self.enabled = True
        # Why the quotas are off (None: they are on).
        self.disabled_by: Optional[str] = None
        self._base = _core._guard_policy(guard)
        self._lock = threading.RLock()
        self._installed: Optional[list[dict[str, Any]]] = None
        self._in_force: list[tuple[str, str, dict[str, dict[str, Any]]]] = []
        self._next_change: Optional[int] = None
        self._seen: Optional[int] = None
        self.refresh()
        self._stop = threading.Event()
        if poll:
            threading.Thread(
                target=_poll_loop,
                args=(weakref.ref(self), self._stop, POLL_SECONDS),
                daemon=True,
                name="usage-guard-quota-poll",
            ).start()

    # -- the policy in force ------------------------------------------------------------------

    def _now_ms(self) -> int:
        if self.clock is not None:
            return int(self.clock.now_ms())
        return int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000)

    def _version(self) -> int:
        counters = _core._quota_counters(
            self.guard, None, {"endpoint": VERSION_ENDPOINT}, VERSION_RULE
        )
        return int(counters[0]["used"]) if counters else 0

    def _bump(self) -> None:
        """Tells every service on the store that the stored policies changed."""
        _core._quota_record(
            self.guard,
            {
                "attributes": {"endpoint": VERSION_ENDPOINT},
                "prefix": VERSION_RULE,
                "metric": "requests",
                "amount": 1,
                "request_id": f"quota-version-{uuid.uuid4()}",
            },
        )
        self.refresh()

    def refresh(self) -> None:
        """Reads the stored assignments and installs the rules of those in force (the guard's
        policy changes only when they do)."""
        with self._lock:
            self._seen = self._version() if self._installed is not None else None
            now = self._now_ms()
            in_force, later = [], []
            why = disabled_by(self._base.quotas_enabled, self.store.enabled())
            if why != self.disabled_by:
                self.enabled, self.disabled_by = why is None, why
                if why is None:
                    LOG.info("quotas enabled")
                else:
                    LOG.warning(
                        "quotas disabled (%s): no stored quota policy is enforced by this guard",
                        why,
                    )
            for a in self.store.assignments() if self.enabled else []:
                kind, ident = a["subject"].split(":", 1)
                if a["effective_from"] <= now:
                    in_force.append((kind, ident, a["limits"]))
                else:
                    later.append(a["effective_from"])
            try:
                rules = compile_rules(in_force, self.warn_at)
                policy = self._base.with_rules(rules) if rules != self._installed else None
            except (PolicyError, ValueError, KeyError, TypeError):
                in_force = enforceable(self._base, in_force, self.warn_at)
                rules = compile_rules(in_force, self.warn_at)
                policy = self._base.with_rules(rules) if rules != self._installed else None
            if policy is not None:
                self.guard.set_policy(policy)
                self._installed = rules
            self._next_change = min(later) if later else None
            self._in_force = in_force
            if self._seen is None:
                self._seen = self._version()

    def _poll_once(self) -> None:
        due = self._next_change is not None and self._next_change <= self._now_ms()
        if due or self._version() != self._seen:
            self.refresh()

    def close(self) -> None:
        """Stops polling for changes (the rules in force stay)."""
        self._stop.set()

    def disable(self) -> None:
        """Turns every stored quota off for every guard on this database and store, within
        1 s (the file policy still applies), visibly: `stats()["enabled"]` is False and each
        service logs a warning on `usage_guard.quota`."""
        self.store.set_enabled(False)
        self._bump()

    def enable(self) -> None:
        """Turns the stored quotas back on (everywhere, as `disable`)."""
        self.store.set_enabled(True)
        self._bump()

    def stats(self) -> dict[str, Any]:
        """`enabled` (and, when off, `disabled_by`: the policy file's `settings.enabled` or
        the database's switch), the stored `policies` and `assignments`, the `rules` in force,
        the store `version` last seen."""
        return {
            "enabled": self.enabled,
            "disabled_by": self.disabled_by,
            "policies": len(self.store.policies()),
            "assignments": len(self.store.assignments()),
            "rules": max(len(self._installed or []) - 1, 0),
            "version": self._seen,
        }

    # -- the call a subject makes -------------------------------------------------------------

    def check(
        self,
        subject: Subject,
        dimension: str,
        amount: int = 1,
        *,
        team: Optional[str] = None,
        role: Optional[str] = None,
        user: Optional[str] = None,
    ) -> Decision:
        """Whether `amount` (in the dimension's unit: whole micro-dollars for ai.cost) fits
        every quota the call applies (`team` / `role` / `user`: the memberships the call
        carries); reserves nothing, one store read."""
        units = units_of(dimension, amount)
        u, attrs, prefix = call_of(subject, dimension, team, role, user)
        return decide(dimension, units, _core._quota_counters(self.guard, u, attrs, prefix))

    async def check_async(
        self,
        subject: Subject,
        dimension: str,
        amount: int = 1,
        *,
        team: Optional[str] = None,
        role: Optional[str] = None,
        user: Optional[str] = None,
    ) -> Decision:
        """`check` as a coroutine."""
        units = units_of(dimension, amount)
        u, attrs, prefix = call_of(subject, dimension, team, role, user)
        counters = await _core._quota_counters_async(self.guard, u, attrs, prefix)
        return decide(dimension, units, counters)

    def record(
        self,
        subject: Subject,
        dimension: str,
        amount: int,
        *,
        request_id: str,
        model: Optional[str] = None,
        executor: Optional[str] = None,
        meta: Any = None,
        team: Optional[str] = None,
        role: Optional[str] = None,
        user: Optional[str] = None,
    ) -> bool:
        """Adds use that did not pass through `admit` (`amount` in the dimension's unit: whole
        micro-dollars for ai.cost) to every quota it applies, never refusing; once per
        `request_id` and dimension (a repeat counts nothing and returns False). The first
        time, a ledger row `rec:<dimension>:<request_id>` (source type `quota`) is written.
        `ai.concurrency` is refused (`ValueError`): it counts calls while they run."""
        spec = record_spec(
            subject, dimension, amount, model, executor, request_id, meta, team, role, user
        )
        return bool(_core._quota_record(self.guard, spec))

    async def record_async(
        self,
        subject: Subject,
        dimension: str,
        amount: int,
        *,
        request_id: str,
        model: Optional[str] = None,
        executor: Optional[str] = None,
        meta: Any = None,
        team: Optional[str] = None,
        role: Optional[str] = None,
        user: Optional[str] = None,
    ) -> bool:
        """`record` as a coroutine."""
        spec = record_spec(
            subject, dimension, amount, model, executor, request_id, meta, team, role, user
        )
        return bool(await _core._quota_record_async(self.guard, spec))

    def usage(
        self, subject: Subject, dimension: str, window: Any = None, *, user: Optional[str] = None
    ) -> QuotaUsage:
        """The subject's own quota on `dimension`: `used` (reserved by running calls
        included), `limit`, `remaining` in `unit` (`micro_usd` for ai.cost, `tokens`,
        `requests`, `calls`), `reset_at` (all but `unit` None when no limit is assigned);
        `window`, when given, must be the assigned one. A role's usage is per member
        (`user=`)."""
        u, attrs, prefix = call_of(subject, dimension, None, None, user)
        counters = _core._quota_counters(self.guard, u, attrs, prefix)
        return usage_view(self._in_force, subject, dimension, window, counters)

    async def usage_async(
        self, subject: Subject, dimension: str, window: Any = None, *, user: Optional[str] = None
    ) -> QuotaUsage:
        """`usage` as a coroutine."""
        u, attrs, prefix = call_of(subject, dimension, None, None, user)
        counters = await _core._quota_counters_async(self.guard, u, attrs, prefix)
        return usage_view(self._in_force, subject, dimension, window, counters)

    def effective_limit(
        self,
        subject: Subject,
        dimension: str,
        *,
        team: Optional[str] = None,
        role: Optional[str] = None,
    ) -> Optional[EffectiveLimit]:
        """What binds a call of `subject` (with the `team` / `role` it carries) on
        `dimension`: the smallest of the team's cap, the role's default and the user's own
        sub-cap — `{"limit", "window", "subject", "unit"}`, the limit in `unit` (micro-dollars
        for ai.cost) — or None when no quota applies."""
        return effective(self._in_force, subject, dimension, team, role)

    # -- policies and assignments -------------------------------------------------------------

    def create_policy(
        self, name: str, limits: Any, *, description: str = "", created_by: Optional[str] = None
    ) -> dict[str, Any]:
        """Stores a named policy (`limits`: quotas.md's JSON, ai.cost in dollars as a document
        writes it); a `QuotaPolicyError` lists every problem at once."""
        out = self.store.create_policy(name, limits, description=description, created_by=created_by)
        self._bump()
        return out

    def update_policy(
        self, name: str, *, limits: Any = None, description: Optional[str] = None
    ) -> dict[str, Any]:
        """Replaces a policy's limits and/or description; every subject it is assigned to
        gets the new limits (counters are kept)."""
        out = self.store.update_policy(name, limits=limits, description=description)
        self._bump()
        return out

    def delete_policy(self, name: str) -> None:
        """Deletes a policy; `PolicyInUse` (nothing deleted) while it is assigned."""
        self.store.delete_policy(name)
        self._bump()

    def policies(self) -> list[dict[str, Any]]:
        """Every stored policy, with the subjects it is assigned to (`subjects`)."""
        assigned = self.store.assignments()
        out = self.store.policies()
        for p in out:
            p["subjects"] = [a["subject"] for a in assigned if a["policy"] == p["name"]]
        return out

    def assignments(self) -> list[dict[str, Any]]:
        """Every assignment: subject, policy, effective_from (ms), limits."""
        return self.store.assignments()

    def assign(self, policy: str, subject: Subject, *, effective_from: Instant = None) -> None:
        """Assigns `policy` to `subject` (replacing its previous one), in force from
        `effective_from` (ISO 8601 or datetime; None: now)."""
        self.store.assign(policy, subject, instant_ms(effective_from), self._now_ms())
        self._bump()

    def unassign(self, subject: Subject) -> bool:
        """Removes the subject's assignment; whether it had one."""
        had = self.store.unassign(subject)
        self._bump()
        return had

    # Async twins of the stored-policy calls (they run in a worker thread).
    async def create_policy_async(self, name: str, limits: Any, **kw: Any) -> dict[str, Any]:
        """`create_policy` as a coroutine."""
        return await asyncio.to_thread(self.create_policy, name, limits, **kw)

    async def update_policy_async(self, name: str, **kw: Any) -> dict[str, Any]:
        """`update_policy` as a coroutine."""
        return await asyncio.to_thread(self.update_policy, name, **kw)

    async def delete_policy_async(self, name: str) -> None:
        """`delete_policy` as a coroutine."""
        await asyncio.to_thread(self.delete_policy, name)

    async def policies_async(self) -> list[dict[str, Any]]:
        """`policies` as a coroutine."""
        return await asyncio.to_thread(self.policies)

    async def assign_async(
        self, policy: str, subject: Subject, *, effective_from: Instant = None
    ) -> None:
        """`assign` as a coroutine."""
        await asyncio.to_thread(self.assign, policy, subject, effective_from=effective_from)

    async def unassign_async(self, subject: Subject) -> bool:
        """`unassign` as a coroutine."""
        return await asyncio.to_thread(self.unassign, subject)
