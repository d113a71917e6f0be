"""The ledger a `--ledger` argument names: a URL in SQLAlchemy's convention, or a file path.

    sqlite:///usage.db          usage.db in the working directory
    sqlite:////var/lib/u.db     /var/lib/u.db (four slashes: the fourth starts the path)
    sqlite://  sqlite:///:memory:   an in-memory database (this process only)
    postgres://… postgresql://…     PostgreSQL
    usage.db, /var/lib/u.db     a SQLite file path, as written

Every command that reads a ledger (`usage`, `audit`, `dashboard`, `recover`, `quota`) wants
the file to exist, so a mistyped path is an error rather than a new, empty ledger; `serve`
and `init` create the file (never its directory).
"""

from __future__ import annotations

import os
from typing import Union

from ._core import PostgresLedger, SqliteLedger

__all__ = ["ACCEPTED", "open_ledger", "sqlite_path", "without_password"]

MEMORY = ":memory:"
ACCEPTED = (
    "accepted: sqlite:///relative.db (from the working directory), sqlite:////absolute.db, "
    "sqlite:// (in memory), postgres://… or postgresql://…, or a SQLite file path"
)


def without_password(url: str) -> str:
    """`url` as a message may show it: the password of `scheme://user:password@host` replaced
    by `***` (as the core shows store and PostgreSQL URLs)."""
    start, at = url.find("://"), url.rfind("@")
    if start < 0 or at <= start:
        return url
    colon = url.find(":", start + 3, at)
    return url if colon < 0 else f"{url[: colon + 1]}***{url[at:]}"


def sqlite_path(url: str) -> str:
    """The SQLite file `url` names (`:memory:` for an in-memory database), as SQLAlchemy
    reads it: what follows `sqlite:///` is the path, so a fourth slash makes it absolute.
    A `ValueError` names the URL when it is not one SQLite URL of that form."""
    if not url.startswith("sqlite:"):
        return url
    if not url.startswith("sqlite://"):
        raise ValueError(f"--ledger {url!r}: a SQLite URL starts with sqlite:///; {ACCEPTED}")
    rest = url[len("sqlite://") :]
    if rest == "":
        return MEMORY
    if not rest.startswith("/"):
        host = rest.split("/", 1)[0]
        raise ValueError(f"--ledger {url!r}: a SQLite URL has no host (got {host!r}); {ACCEPTED}")
    if "?" in rest:
        raise ValueError(f"--ledger {url!r}: SQLite URLs take no query parameters; {ACCEPTED}")
    path = rest[1:]
    if path in ("", MEMORY):
        return MEMORY
    return path


def _meant(url: str, path: str) -> str:
    """How an error names the file: the path, and where it resolved when it is relative."""
    shown = repr(path) if path == url else f"{path!r} (from {url!r})"
    if not os.path.isabs(path):
        shown += f", that is {os.path.abspath(path)!r}"
    return shown


def open_ledger(url: str, *, create: bool = False) -> Union[SqliteLedger, PostgresLedger]:
    """The ledger `url` names (see the module's forms). `create`: a missing SQLite file is
    created (its directory must exist); otherwise it must exist. A `FileNotFoundError` names
    the file meant (and the absolute path of a relative one); a `ValueError` a URL that is
    none of the accepted forms."""
    if url.startswith(("postgres://", "postgresql://")):
        return PostgresLedger(url)
    if "://" in url and not url.startswith("sqlite:"):
        scheme = url.split("://", 1)[0]
        shown = without_password(url)
        raise ValueError(f"--ledger {shown!r}: {scheme!r} is not a ledger scheme; {ACCEPTED}")
    path = sqlite_path(url)
    if path != MEMORY:
        if create:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder):
                raise FileNotFoundError(
                    f"no directory {folder!r} for the ledger {_meant(url, path)}; create it "
                    "first (the ledger file is created, its directory is not)"
                )
        elif not os.path.exists(path):
            raise FileNotFoundError(f"no ledger at {_meant(url, path)}")
    return SqliteLedger(path)
