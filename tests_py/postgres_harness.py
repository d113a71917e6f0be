"""A PostgreSQL server for the tests: the `pg_url` fixture starts one (initdb + pg_ctl in a
temp directory, as the `postgres` user when run as root) or uses the machine's server on
127.0.0.1:5432 (trust auth, database `test`), and gives fresh databases on it."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from typing import Any, Iterator, Optional

import pytest


def _tool(name: str) -> Optional[str]:
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for d in ["/usr/local/bin", *versions]:
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    return shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(cmd: list[str], as_postgres: bool) -> bool:
    if as_postgres:
        # runuser lives in /sbin, which a CI PATH may leave out.
        runuser = shutil.which("runuser") or shutil.which("runuser", path="/usr/sbin:/sbin")
        cmd = [runuser or "runuser", "-u", "postgres", "--", *cmd]
    return subprocess.run(cmd, capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def pg_url() -> Iterator[Any]:
    """A function giving the URL of a fresh database on a running server."""
    initdb, pg_ctl = _tool("initdb"), _tool("pg_ctl")
    as_postgres = os.geteuid() == 0
    tmp = tempfile.mkdtemp(prefix="ug-pg-")
    port, base, started = 5432, "test", False
    if initdb and pg_ctl:
        if as_postgres:
            shutil.chown(tmp, "postgres", "postgres")
        data = os.path.join(tmp, "data")
        port = _free_port()
        opts = f"-p {port} -k {tmp} -c listen_addresses=127.0.0.1 -c fsync=off"
        started = _run([initdb, "-D", data, "-A", "trust", "-U", "postgres"], as_postgres) and _run(
            [pg_ctl, "-D", data, "-w", "-l", os.path.join(tmp, "log"), "-o", opts, "start"],
            as_postgres,
        )
        base = "postgres"
    if not started:
        port, base = 5432, "test"
        try:
            socket.create_connection(("127.0.0.1", 5432), timeout=2).close()
        except OSError:
            pytest.fail("no PostgreSQL: initdb/pg_ctl failed and nothing on 127.0.0.1:5432")
    seq = [0]

    def fresh() -> str:
        seq[0] += 1
        name = f"ugpy_{os.getpid()}_{seq[0]}"
        admin = f"postgres://postgres@127.0.0.1:{port}/{base}"
        _create_database(admin, name)
        return f"postgres://postgres@127.0.0.1:{port}/{name}"

    yield fresh
    if started:
        _run(
            [pg_ctl, "-D", os.path.join(tmp, "data"), "-m", "immediate", "-w", "stop"], as_postgres
        )
    shutil.rmtree(tmp, ignore_errors=True)


def _create_database(admin_url: str, name: str) -> None:
    psql = _tool("psql")
    if psql:
        subprocess.run(
            [psql, admin_url, "-c", f"CREATE DATABASE {name}"], check=True, capture_output=True
        )
        return
    pytest.fail("psql is needed to create a test database")
