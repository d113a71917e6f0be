"""`usage-guard serve` in its own process for the gateway's transport tests: the real CLI
with a policy written to a file, its address read from its first line, and raw-socket
helpers for clients an SDK cannot play (slow, idle, half-written)."""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional


@contextmanager
def serve(
    document: dict[str, Any],
    tmp_path: Path,
    *,
    descriptors: Optional[int] = None,
    args: tuple[str, ...] = (),
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Runs `usage-guard serve` on `document` (written as JSON) on a free port, with more
    command-line `args` (`("--store", url)`); yields the process and its `http://host:port`.
    `descriptors`: the child's soft RLIMIT_NOFILE (its hard limit stays the parent's).
    Killed afterwards if still running."""
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(document))

    def limit() -> None:
        if descriptors is not None:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (descriptors, hard))

    proc = subprocess.Popen(
        [sys.executable, "-m", "usage_guard.cli", "serve", "--policy", str(path)]
        + ["--listen", "127.0.0.1:0", *args],
        cwd=tmp_path,
        env={**os.environ},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://\S+)", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        yield proc, m.group(1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def raise_own_descriptors(at_least: int) -> None:
    """Raises this process's soft RLIMIT_NOFILE to `at_least` (skips when the hard limit is
    lower)."""
    import pytest

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < at_least:
        pytest.skip(f"needs {at_least} file descriptors; the hard limit is {hard}")
    if soft < at_least:
        resource.setrlimit(resource.RLIMIT_NOFILE, (at_least, hard))


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the peer closes `sock` within `seconds` (what it sends meanwhile is read and
    dropped)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if sock.recv(65536) == b"":
                return True
        except socket.timeout:
            return False
        except OSError:
            return True
    return False


def read_response(sock: socket.socket, seconds: float = 5.0) -> bytes:
    """Reads until the peer closes or `seconds` pass; what came."""
    sock.settimeout(seconds)
    got = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (socket.timeout, OSError):
            break
        if not chunk:
            break
        got += chunk
    return got
