#!/usr/bin/env bash
# The edit loop's checks, under a minute when the build is warm: the layer and size checks,
# rustfmt, clippy (all features, and the core alone), the extension rebuilt into the venv,
# ruff, the stub check and mypy --strict. No test runs here: `make test` (scripts/test.sh)
# runs these and then every test.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s  [%ss]\n' "$*" "$SECONDS"; }
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
  "$PY" -m pip install -q --disable-pip-version-check -r requirements-test.txt
fi

step "layers and sizes (scripts/check_layers.py, scripts/check_sizes.py)"
python3 scripts/check_layers.py
python3 scripts/check_sizes.py

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --all-targets --all-features --quiet -- -D warnings
cargo clippy --all-targets --no-default-features --quiet -- -D warnings

step "build the extension (maturin develop)"
VIRTUAL_ENV="$(cd "$VENV" && pwd)" "$VENV/bin/maturin" develop --quiet 2>&1 | tail -n 2

step "ruff"
"$VENV/bin/ruff" check python tests_py benches examples
"$VENV/bin/ruff" format --check python tests_py benches examples

step "stubtest"
"$PY" -m mypy.stubtest usage_guard._core --ignore-missing-stub --allowlist .stubtest-allowlist

step "mypy --strict (settings in pyproject.toml)"
"$PY" -m mypy --strict python/usage_guard examples
