#!/usr/bin/env bash
# Runs every test: Rust (fmt, clippy, cargo test), the Python extension build, Python lints,
# the stub check, and pytest. Installs what it needs; starts its own services (the tests
# launch redis-server / postgres processes on free ports and stop them by pid).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s  [%ss]\n' "$*" "$SECONDS"; }

step "tools"
if ! command -v redis-server >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null
fi
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq postgresql) >/dev/null
fi
# The dashboard's browser tests drive Debian's Chromium (never a downloaded browser).
if ! command -v chromium >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null || echo "chromium not installed: the dashboard's browser tests skip"
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install -q --disable-pip-version-check -r requirements-test.txt

VENV="$VENV" bash scripts/check.sh

# The LiteLLM proxy's venv (tests_py/litellm_proxy.py, ~750 MB from the package index) is made
# meanwhile: pip waits on the network and the disk while cargo below uses the CPU. Its
# fixture takes the same file lock and finds it ready (or retries, and says why).
"$PY" -c "import sys; sys.path.insert(0, 'tests_py'); import litellm_proxy; litellm_proxy.proxy_venv()" \
  >"$VENV/litellm-proxy-venv.log" 2>&1 &
PROXY_VENV=$!

step "cargo test --features gateway,thread-mimalloc (the core's, the adapters' and the gateway's tests, on the wheel's allocator)"
# One build serves all: the gateway's own tests (framing, bodies, keys, and the fuzz targets
# over arbitrary bytes, bounded by UG_FUZZ_CASES) need its feature, and the rest run the same
# with it on. The core without adapters is compiled (every target) by clippy in
# scripts/check.sh; its tests are the same code, so they are not run a second time.
cargo test --quiet --features gateway,thread-mimalloc

step "pytest"
wait "$PROXY_VENV" || echo "the LiteLLM proxy's venv was not made ahead (its test retries): $(tail -n 3 "$VENV/litellm-proxy-venv.log")"
# Two workers, each given whole files (module fixtures and the order within a file kept): most
# tests wait on processes, sockets and servers, so two share the 2 cores well.
"$PY" -m pytest -q -p no:cacheprovider -n "${UG_PYTEST_WORKERS:-2}" --dist loadfile tests_py
# The wheel on CPython 3.9-3.13, built in the dev profile from what `maturin develop` compiled
# above: a release build (zig-linked, manylinux2014) and the sdist each compile the core once
# more, cold (minutes on 2 cores): `make test-wheels` runs those.
# The whole suite already ran above on this Python (3.11); on the wheel it runs on 3.9 (the
# oldest), the smoke subset on the others. On 3.9 it leaves out what drives only the Rust
# core through a Python harness (tests_py/store; the ledger writer's kill and open-race
# files: 46 s of the suite) and the LiteLLM proxy's file (90 s: a proxy process whose own
# venv is made for the test's Python; test_litellm.py still runs LiteLLM in-process on 3.9).
# `make test-wheels` runs all of them on 3.9 and 3.13.
UG_WHEEL_SKIP="tests_py/ledger/test_ledger_kill.py tests_py/ledger/test_ledger_open_race.py \
tests_py/providers/test_litellm_proxy.py" \
  UG_SDIST=0 UG_WHEEL_PROFILE=dev UG_FULL=3.9 VENV="$VENV" bash scripts/test_wheels.sh
