"""The real LiteLLM proxy for tests_py/providers/test_litellm_proxy.py: a venv of its own with
`litellm[proxy]` 1.106.12 (the test venv's `litellm` is 1.110.2, whose `litellm[proxy]` does
not install: the `litellm-proxy` it needs is not on PyPI), and the proxy process on a free
port, stopped by pid.

The venv is made once and reused: `.venv-litellm-proxy` at the repository's root (or
`UG_LITELLM_PROXY_VENV`), from tests_py/litellm-proxy-requirements.txt (`litellm[proxy]`
1.106.12 and every package it needs, pinned: installed without running pip's resolver), ready
when its marker names that file's hash and the Python it was made with.
It holds LiteLLM only: the proxy imports the `usage_guard` under test (the test process's,
the build the rest of the suite tests) through `PYTHONPATH`, never a second build.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

import pytest
import usage_guard

ROOT = Path(__file__).resolve().parent.parent
PIN = "litellm[proxy]==1.106.12"
LOCK = Path(__file__).resolve().parent / "litellm-proxy-requirements.txt"
# What pip prints when the package index cannot be reached (no network): the test skips then.
OFFLINE = re.compile(
    r"NewConnectionError|Network is unreachable|Temporary failure in name resolution|"
    r"Name or service not known|ConnectTimeout|ReadTimeout|ProxyError|No matching distribution"
)


def _marker() -> str:
    digest = hashlib.sha256(LOCK.read_bytes()).hexdigest()[:16]
    return f"{PIN} {LOCK.name} {digest} python{sys.version_info[0]}.{sys.version_info[1]}\n"


def proxy_venv() -> Path:
    """The proxy's venv, made (under a file lock, for parallel runs) when missing or stale;
    skips the calling test when pip cannot reach the package index."""
    venv = Path(os.environ.get("UG_LITELLM_PROXY_VENV") or ROOT / ".venv-litellm-proxy")
    ready = venv / "ug-ready"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.is_file() and ready.read_text() == _marker():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        pip += ["--disable-pip-version-check", "--retries", "1", "--timeout", "20"]
        # --no-compile: the proxy compiles what it imports on its first start (a small part of
        # 750 MB), which halves the install.
        pip += ["--no-deps", "--no-compile", "-r", str(LOCK)]
        done = subprocess.run(pip, capture_output=True, text=True)
        if done.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            tail = done.stderr.strip()[-1500:]
            if OFFLINE.search(done.stderr):
                pytest.skip(f"cannot install {PIN} (the package index is unreachable): {tail}")
            raise RuntimeError(f"pip install {PIN} failed:\n{tail}")
        ready.write_text(_marker())
    return venv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proxy:
    """`litellm --config CONFIG --port PORT` from the proxy venv, with `usage_guard` (the
    test process's) importable; `url` once it answers its liveness check."""

    def __init__(self, venv: Path, config: Path, env: dict[str, str], workdir: Path) -> None:
        # Only the package under test goes on the path, not the rest of the test venv.
        shim = workdir / "pythonpath"
        shim.mkdir(exist_ok=True)
        link = shim / "usage_guard"
        if not link.exists():
            link.symlink_to(Path(usage_guard.__file__).resolve().parent)
        self.port = free_port()
        self.log = workdir / "proxy.log"
        full_env = {**os.environ, **env, "PYTHONPATH": str(shim)}
        full_env.pop("VIRTUAL_ENV", None)
        command = [str(venv / "bin" / "litellm"), "--config", str(config)]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--num_workers", "1"]
        with open(self.log, "wb") as out:
            self.proc: Optional[subprocess.Popen[bytes]] = subprocess.Popen(
                command, cwd=workdir, env=full_env, stdout=out, stderr=subprocess.STDOUT
            )
        self._wait_live()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _wait_live(self) -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"the LiteLLM proxy exited:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health/liveliness", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the LiteLLM proxy did not answer in 180 s:\n{self.tail()}")

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        """SIGTERM by pid, SIGKILL if it has not exited 15 s later."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
