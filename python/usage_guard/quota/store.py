"""Where quota policies and assignments live: the `quota_policies` and `quota_assignments`
tables in the ledger's database (SQLite or PostgreSQL, through `QuotaDatabase`), or in an
in-memory SQLite database when the guard has no ledger. Every change is one transaction: a
failed change leaves nothing half-written. The tables and their migrations are the Rust
ledger layer's (src/guard/ledger/quota_schema.rs): `QuotaDatabase.migrate` runs them."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Optional, Protocol

from .. import _core
from .model import QuotaPolicyError, check_limits, parse_subject

BEGIN = {"sqlite": "BEGIN IMMEDIATE", "postgres": "BEGIN"}
POLICY_COLUMNS = "id, name, description, limits, created_by, created_at, updated_at"


class PolicyInUse(ValueError):
    """A policy still assigned to a subject cannot be deleted."""


class Database(Protocol):
    """What the store runs statements on (`_core.QuotaDatabase`)."""

    @property
    def dialect(self) -> str: ...

    def migrate(self) -> None: ...

    def execute(
        self, sql: str, params: Optional[Sequence[Any]] = None
    ) -> list[tuple[Any, ...]]: ...


class Tx:
    """One transaction's statements, `?` placeholders in both dialects."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def run(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Runs a statement; its rows."""
        if self.db.dialect == "postgres":
            parts = sql.split("?")
            sql = parts[0] + "".join(f"${i}{p}" for i, p in enumerate(parts[1:], start=1))
        return self.db.execute(sql, list(params))

    def one(self, sql: str, *params: Any) -> Optional[tuple[Any, ...]]:
        """The first row, if any."""
        rows = self.run(sql, *params)
        return rows[0] if rows else None


def now_ms() -> int:
    """Wall-clock milliseconds (the rows' created_at / updated_at)."""
    return int(time.time() * 1000)


class QuotaStore:
    """Named policies and their assignments to subjects, in `db`'s tables."""

    def __init__(self, db: Optional[Database] = None) -> None:
        self.db: Database = db if db is not None else _core.QuotaDatabase()
        self._lock = threading.Lock()
        self.db.migrate()

    @contextmanager
    def tx(self) -> Iterator[Tx]:
        """`BEGIN` … `COMMIT`, or `ROLLBACK` on any error, one at a time in this process."""
        with self._lock:
            self.db.execute(BEGIN[self.db.dialect])
            try:
                yield Tx(self.db)
            except BaseException:
                try:
                    self.db.execute("ROLLBACK")
                except Exception:  # noqa: BLE001 - the connection may be gone; the error stands
                    pass
                raise
            self.db.execute("COMMIT")

    def create_policy(
        self,
        name: str,
        limits: Any,
        *,
        description: str = "",
        created_by: Optional[str] = None,
    ) -> dict[str, Any]:
        """Adds a named policy; a `QuotaPolicyError` (a ValueError) naming every problem at
        once when the name is bad or taken or a limit is bad."""
        errors: list[str] = []
        named = isinstance(name, str) and bool(name.strip())
        if not named:
            errors.append(f"name: {name!r} is not a policy name; accepted: a non-empty string")
        checked: dict[str, Any] = {}
        try:
            checked = check_limits(limits)
        except QuotaPolicyError as e:
            errors.extend(e.errors)
        at = now_ms()
        with self.tx() as tx:
            if named and tx.one("SELECT 1 FROM quota_policies WHERE name = ?", name):
                errors.insert(0, f"name: a policy {name!r} exists already; accepted: a new name")
            if errors:
                raise QuotaPolicyError(errors)
            tx.run(
                "INSERT INTO quota_policies (name, description, limits, created_by, created_at,"
                " updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                name,
                description,
                json.dumps(checked),
                created_by,
                at,
                at,
            )
        return self.policy(name)

    def update_policy(
        self, name: str, *, limits: Any = None, description: Optional[str] = None
    ) -> dict[str, Any]:
        """Replaces a policy's limits and/or description."""
        encoded = json.dumps(check_limits(limits)) if limits is not None else None
        with self.tx() as tx:
            self._id(tx, name)
            if encoded is not None:
                tx.run(
                    "UPDATE quota_policies SET limits = ?, updated_at = ? WHERE name = ?",
                    encoded,
                    now_ms(),
                    name,
                )
            if description is not None:
                tx.run(
                    "UPDATE quota_policies SET description = ?, updated_at = ? WHERE name = ?",
                    description,
                    now_ms(),
                    name,
                )
        return self.policy(name)

    def delete_policy(self, name: str) -> None:
        """Deletes a policy; a PolicyInUse error (nothing deleted) while it is assigned."""
        with self.tx() as tx:
            policy_id = self._id(tx, name)
            subjects = tx.run(
                "SELECT subject_type, subject_id FROM quota_assignments WHERE policy_id = ?"
                " ORDER BY subject_type, subject_id",
                policy_id,
            )
            if subjects:
                held = ", ".join(f"{t}:{i}" for t, i in subjects)
                raise PolicyInUse(
                    f"policy: {name!r} is assigned to {held}; unassign it first (unassign(subject))"
                )
            tx.run("DELETE FROM quota_policies WHERE id = ?", policy_id)

    def _id(self, tx: Tx, name: str) -> int:
        row = tx.one("SELECT id FROM quota_policies WHERE name = ?", name)
        if row is None:
            names = [r[0] for r in tx.run("SELECT name FROM quota_policies ORDER BY name")]
            raise KeyError(
                f"policy: {name!r} is not a policy; defined: {', '.join(names) or 'none'}"
            )
        return int(row[0])

    def policy(self, name: str) -> dict[str, Any]:
        """One policy (id, name, description, limits, created_by, created_at, updated_at in
        ms); a KeyError naming the defined ones when absent."""
        with self.tx() as tx:
            self._id(tx, name)
            row = tx.one(f"SELECT {POLICY_COLUMNS} FROM quota_policies WHERE name = ?", name)
        assert row is not None
        return _policy_row(row)

    def policies(self) -> list[dict[str, Any]]:
        """Every policy, by name."""
        with self.tx() as tx:
            rows = tx.run(f"SELECT {POLICY_COLUMNS} FROM quota_policies ORDER BY name")
        return [_policy_row(r) for r in rows]

    def assign(
        self, policy: str, subject: Any, effective_from_ms: int = 0, now_ms: int = 0
    ) -> None:
        """Assigns `policy` to `subject` (replacing its previous one) from `effective_from_ms`.
        A subject has one assignment: one from a later time than `now_ms` over one in force
        now is refused (it would lift the one in force at once, not at that time)."""
        kind, ident = parse_subject(subject)
        with self.tx() as tx:
            policy_id = self._id(tx, policy)
            if effective_from_ms > now_ms:
                _no_gap_before(tx, kind, ident, effective_from_ms, now_ms)
            tx.run(
                "INSERT INTO quota_assignments (policy_id, subject_type, subject_id,"
                " effective_from) VALUES (?, ?, ?, ?) ON CONFLICT (subject_type, subject_id)"
                " DO UPDATE SET policy_id = excluded.policy_id,"
                " effective_from = excluded.effective_from",
                policy_id,
                kind,
                ident,
                int(effective_from_ms),
            )

    def unassign(self, subject: Any) -> bool:
        """Removes the subject's assignment; whether it had one."""
        kind, ident = parse_subject(subject)
        with self.tx() as tx:
            had = tx.one(
                "SELECT 1 FROM quota_assignments WHERE subject_type = ? AND subject_id = ?",
                kind,
                ident,
            )
            tx.run(
                "DELETE FROM quota_assignments WHERE subject_type = ? AND subject_id = ?",
                kind,
                ident,
            )
        return had is not None

    def enabled(self) -> bool:
        """Whether quotas are on (the stored switch; on unless turned off)."""
        with self.tx() as tx:
            row = tx.one("SELECT value FROM quota_settings WHERE name = 'enabled'")
        return row is None or row[0] == "true"

    def set_enabled(self, on: bool) -> None:
        """Turns every quota on or off for every guard on this database."""
        with self.tx() as tx:
            tx.run("DELETE FROM quota_settings WHERE name = 'enabled'")
            tx.run(
                "INSERT INTO quota_settings (name, value) VALUES ('enabled', ?)",
                "true" if on else "false",
            )

    def assignments(self) -> list[dict[str, Any]]:
        """Every assignment: subject, policy, effective_from (ms), limits."""
        with self.tx() as tx:
            rows = tx.run(
                "SELECT a.subject_type, a.subject_id, p.name, a.effective_from, p.limits"
                " FROM quota_assignments a JOIN quota_policies p ON p.id = a.policy_id"
                " ORDER BY a.subject_type, a.subject_id"
            )
        return [
            {
                "subject": f"{r[0]}:{r[1]}",
                "policy": r[2],
                "effective_from": int(r[3]),
                "limits": json.loads(r[4]),
            }
            for r in rows
        ]


def _policy_row(row: tuple[Any, ...]) -> dict[str, Any]:
    keys = ("id", "name", "description", "limits", "created_by", "created_at", "updated_at")
    out = dict(zip(keys, row))
    out["limits"] = json.loads(out["limits"])
    return out


def _no_gap_before(tx: Tx, kind: str, ident: str, effective_from_ms: int, now_ms: int) -> None:
    """Refuses an assignment from a later time over one in force now (see `assign`)."""
    found = tx.one(
        "SELECT p.name, a.effective_from FROM quota_assignments a JOIN quota_policies p"
        " ON p.id = a.policy_id WHERE a.subject_type = ? AND a.subject_id = ?",
        kind,
        ident,
    )
    if found is not None and int(found[1]) <= now_ms:
        when = dt.datetime.fromtimestamp(effective_from_ms / 1000, dt.timezone.utc).isoformat()
        raise ValueError(
            f"effective_from: {kind}:{ident} has {found[0]!r} in force now, and a subject has "
            f"one assignment: one from {when} would replace it at once, leaving the time "
            "between without it. Assign it at that time (or unassign first, on purpose)"
        )
