#!/usr/bin/env bash
# The edit loop's checks, under a minute when the build is warm: the layer and size checks,
# rustfmt, clippy (all features, and the core alone), the extension rebuilt into the venv,
# ruff, the stub check and mypy --strict (ruff and mypy beside the cargo steps). No test
# runs here: `make test` (scripts/test.sh) runs these and then every test.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s  [%ss]\n' "$*" "$SECONDS"; }
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
  "$PY" -m pip install -q --disable-pip-version-check -r requirements-test.txt
fi

# ruff and mypy read only Python sources and the stubs, not the extension: they run beside
# the cargo steps (on the second core while rustc runs one crate), their output shown after.
PYCHECKS=$(mktemp -d)
(
  "$VENV/bin/ruff" check python tests_py benches examples &&
    "$VENV/bin/ruff" format --check python tests_py benches examples
) >"$PYCHECKS/ruff" 2>&1 &
RUFF=$!
"$PY" -m mypy --strict python/usage_guard examples >"$PYCHECKS/mypy" 2>&1 &
MYPY=$!
trap 'kill "$RUFF" "$MYPY" 2>/dev/null || true; rm -rf "$PYCHECKS"' EXIT
# Shows a background check's output; fails the script when the check failed.
finish() {
  local status=0
  wait "$1" || status=$?
  cat "$PYCHECKS/$2"
  return "$status"
}

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

step "ruff (run beside the cargo steps)"
finish "$RUFF" ruff

step "stubtest"
"$PY" -m mypy.stubtest usage_guard._core --ignore-missing-stub --allowlist .stubtest-allowlist

step "mypy --strict (settings in pyproject.toml; run beside the cargo steps)"
finish "$MYPY" mypy
