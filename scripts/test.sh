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

step "cargo test"
cargo test --quiet

step "cargo test --features gateway --lib gateway:: (the gateway's unit tests and fuzz targets)"
# Plain `cargo test` builds the library without the gateway; its own tests (framing, bodies,
# keys, and the fuzz targets over arbitrary bytes, bounded by UG_FUZZ_CASES) need the feature.
cargo test --quiet --features gateway --lib gateway::

step "cargo test --no-default-features --lib (the core without adapters)"
# The core's own tests run again without the adapters (their modules are cfg'd out); every
# target, the integration binary included, was already compiled without them by clippy
# (scripts/check.sh), and the integration tests' engine paths are the same code.
cargo test --quiet --no-default-features --lib

step "pytest"
wait "$PROXY_VENV" || echo "the LiteLLM proxy's venv was not made ahead (its test retries): $(tail -n 3 "$VENV/litellm-proxy-venv.log")"
# Two workers, each given whole files (module fixtures and the order within a file kept): most
# tests wait on processes, sockets and servers, so two share the 2 cores well.
"$PY" -m pytest -q -p no:cacheprovider -n "${UG_PYTEST_WORKERS:-2}" --dist loadfile tests_py
# The wheel on CPython 3.9-3.13, built in the dev profile from what `maturin develop` compiled
# above: a release build (zig-linked, manylinux2014) and the sdist each compile the core once
# more, cold (minutes on 2 cores): `make test-wheels` runs those.
# The whole suite already ran above on this Python (3.11); on the wheel it runs on 3.9 (the
# oldest; all but tests_py/store), the smoke subset on the others.
UG_SDIST=0 UG_WHEEL_PROFILE=dev UG_FULL=3.9 VENV="$VENV" bash scripts/test_wheels.sh
