#!/usr/bin/env bash
# The wheel and the sdist, on every CPython the package claims (3.9-3.13):
#  1. builds the release abi3 wheel and the sdist (scripts/build_wheel.sh) unless WHEEL= names
#     a wheel already built, and checks what the wheel holds;
#  2. for each Python, a fresh virtualenv (uv) gets that one wheel and the test dependencies,
#     with no Rust toolchain on the PATH (asserted: `command -v cargo` fails), and runs the
#     Python suite: all of tests_py but tests_py/store on the oldest and newest, the smoke subset
#     (tests_py/package/test_wheel_smoke.py) on the others;
#  3. times a plain `pip install` of the wheel into a fresh venv (no toolchain), then installs
#     the sdist into another (the from-source path: maturin and cargo compile the core) and
#     runs the smoke subset there.
# Installs what it needs (uv, maturin, redis-server, postgresql); needs the CPythons
# themselves (pyenv's, or pythonX.Y on the PATH). `make test-wheels` runs it; so does
# scripts/test.sh, last.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PYTHONS=${UG_PYTHONS:-"3.9 3.10 3.11 3.12 3.13"}
FULL=${UG_FULL:-"3.9 3.13"}  # the rest run the smoke subset
SKIP=${UG_WHEEL_SKIP:-}      # test files the full suite leaves out (space-separated paths)
VENV=${VENV:-.venv}          # tools: maturin, uv

step() { printf '\n==> %s  [%ss]\n' "$*" "$SECONDS"; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }

step "tools"
if ! command -v redis-server >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null
fi
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq postgresql) >/dev/null
fi
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.9.4,<2" uv
case $VENV in /*) UV=$VENV/bin/uv ;; *) UV=$ROOT/$VENV/bin/uv ;; esac
export UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1

find_python() {  # the newest X.Y.Z of CPython X.Y: pyenv's, else pythonX.Y on the PATH
  local v=$1 found=""
  for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v"; do
    [ -x "$p" ] && found=$p
  done
  [ -n "$found" ] || found=$(command -v "python$v" || true)
  [ -n "$found" ] || { echo "CPython $v not found: every supported Python is tested" >&2; return 1; }
  echo "$found"
}
PYS=()
for v in $PYTHONS; do PYS+=("$(find_python "$v")"); done

step "wheel and sdist"
if [ -z "${WHEEL:-}" ]; then
  t=$(now)
  VENV=$VENV bash scripts/build_wheel.sh
  echo "built in $(since "$t") s"
  WHEEL=$(ls "$ROOT"/dist/usage_guard-*.whl)
fi
SDIST=${SDIST:-$(ls "$ROOT"/dist/usage_guard-*.tar.gz)}
python3 - "$WHEEL" "$SDIST" <<'EOF'
import re, sys, tarfile, zipfile

wheel, sdist = sys.argv[1:]
tag = re.search(r"-(cp\d+-abi3-[^/]+)\.whl$", wheel)
assert tag and tag.group(1).startswith("cp39-abi3-"), f"not one abi3 wheel for 3.9+: {wheel}"
assert "linux_x86_64" not in tag.group(1) or "manylinux" in tag.group(1), "no manylinux tag"
names = zipfile.ZipFile(wheel).namelist()
for want in ["usage_guard/__init__.py", "usage_guard/py.typed", "usage_guard/_core.pyi",
             "usage_guard/_core.abi3.so"]:
    assert want in names, f"{want} missing from the wheel"
assert sum(n.endswith(".so") for n in names) == 1, "more than one extension in the wheel"
assert any(re.search(r"\.dist-info/licen[cs]es/LICENSE$", n) for n in names), "no LICENSE"
meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA"))).decode()
assert "Requires-Python: >=3.9" in meta, meta
with tarfile.open(sdist) as t:
    members = t.getnames()
for want in ["Cargo.toml", "Cargo.lock", "pyproject.toml", "LICENSE", "src/lib.rs",
             "python/usage_guard/_core.pyi", "python/usage_guard/py.typed"]:
    assert any(m.split("/", 1)[-1] == want for m in members), f"{want} missing from the sdist"
assert not any(m.endswith(".so") for m in members), "a built extension in the sdist"
print(f"wheel tag {tag.group(1)}; py.typed, stubs, LICENSE inside; sdist complete")
EOF

# A PATH with no Rust toolchain: drop every directory holding cargo, rustc or rustup (and
# pyenv's shims, which could resolve to anything); the virtualenv's bin goes first later.
NORUST_PATH=""
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  case "$d" in *pyenv/shims* | *pyenv-virtualenv/shims* | "") continue ;; esac
  if [ -e "$d/cargo" ] || [ -e "$d/rustc" ] || [ -e "$d/rustup" ]; then
    case "$d" in /usr/bin | /bin) echo "a Rust toolchain lives in $d: cannot hide it" >&2; exit 1 ;; esac
    continue
  fi
  NORUST_PATH=${NORUST_PATH:+$NORUST_PATH:}$d
done
norust() {  # run a command with no Rust toolchain reachable
  env -u CARGO_HOME -u RUSTUP_HOME -u CARGO -u RUSTC -u RUSTUP_TOOLCHAIN -u CARGO_TARGET_DIR \
    -u VIRTUAL_ENV -u PYTHONPATH UG_WHEEL_TEST=1 PATH="$NORUST_PATH" "$@"
}
if norust bash -c 'command -v cargo || command -v rustc || command -v rustup'; then
  echo "a Rust toolchain is still reachable on $NORUST_PATH" >&2
  exit 1
fi
echo "no cargo, rustc or rustup on the PATH used below: $NORUST_PATH"

WORK=$(mktemp -d /tmp/ug-wheels.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
TEST_REQS=$WORK/requirements.txt
grep -v -E '^(maturin|ruff|mypy)\b' requirements-test.txt >"$TEST_REQS"  # build/lint tools

RESULTS=()
i=0
for v in $PYTHONS; do
  py=${PYS[$i]}
  i=$((i + 1))
  env_dir=$WORK/py$v
  step "CPython $v ($py): the wheel, no Rust toolchain"
  t=$(now)
  norust "$UV" venv -q --python "$py" "$env_dir"
  norust "$UV" pip install -q --python "$env_dir/bin/python" --no-build "$WHEEL" -r "$TEST_REQS"
  echo "virtualenv + wheel + test dependencies in $(since "$t") s"
  if [[ " $FULL " == *" $v "* ]]; then
    what="full suite"
    # tests_py/store drives the Rust stores through Redis and runs on 3.11 above; the
    # Python it runs here is only its harness. So are the other files' cases on the slot
    # groups and leased layouts (`[...-slot_groups]`, `[...-leased]`): the same Python
    # through other Redis layouts.
    args=(-n "${UG_PYTEST_WORKERS:-2}" --dist loadfile tests_py --ignore=tests_py/store
          -k "not slot_groups and not -leased and not [leased")
    for path in $SKIP; do args+=("--ignore=$path"); done
  else
    what="smoke subset"
    args=(tests_py/package/test_wheel_smoke.py)
  fi
  t=$(now)
  log=$WORK/pytest-$v.log
  if ! norust PATH="$env_dir/bin:$NORUST_PATH" "$env_dir/bin/python" -m pytest -q \
    -p no:cacheprovider "${args[@]}" >"$log" 2>&1; then
    tail -n 80 "$log"
    echo "CPython $v: $what FAILED" >&2
    exit 1
  fi
  grep -E "[0-9]+ (passed|failed)" "$log" | tail -n 1
  RESULTS+=("CPython $v ($("$env_dir/bin/python" -c 'import platform; print(platform.python_version())')): $what passed in $(since "$t") s")
  rm -rf "$env_dir"
done

OLDEST=${PYS[0]}  # its bundled pip is the oldest pip the wheel and the sdist must work with
py=$OLDEST
step "pip install of the wheel alone (CPython ${PYTHONS%% *}'s own pip, fresh venv, no Rust toolchain)"
norust "$py" -m venv "$WORK/pipwheel"
t=$(now)
norust "$WORK/pipwheel/bin/python" -m pip install -q --disable-pip-version-check --only-binary :all: "$WHEEL"
WHEEL_TIME=$(since "$t")
norust "$WORK/pipwheel/bin/usage-guard" --version
echo "pip install of the wheel: $WHEEL_TIME s"

if [ "${UG_SDIST:-1}" = 1 ]; then
step "pip install of the sdist (fresh venv, from source: maturin and cargo compile the core)"
# maturin already built the wheel above from this sdist, unpacked; here pip drives the same
# build through the PEP 517 backend. Cargo's target dir is shared with the wheel build, so
# what is compiled there is reused (seconds); UG_SDIST_COLD=1 builds in an empty one instead,
# the time of a first install from source.
if [ "${UG_SDIST_COLD:-0}" = 1 ]; then
  SDIST_TARGET=$WORK/target-sdist
else
  SDIST_TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
fi
"$py" -m venv "$WORK/pipsdist"
t=$(now)
CARGO_TARGET_DIR=$SDIST_TARGET "$WORK/pipsdist/bin/python" -m pip install -q \
  --disable-pip-version-check --no-cache-dir "$SDIST"
SDIST_TIME=$(since "$t")
echo "pip install of the sdist: $SDIST_TIME s (cargo target dir $SDIST_TARGET)"
"$WORK/pipsdist/bin/python" -m pip install -q --disable-pip-version-check -r "$TEST_REQS"
t=$(now)
log=$WORK/pytest-sdist.log
if ! norust PATH="$WORK/pipsdist/bin:$NORUST_PATH" "$WORK/pipsdist/bin/python" -m pytest -q \
  -p no:cacheprovider tests_py/package/test_wheel_smoke.py >"$log" 2>&1; then
  tail -n 80 "$log"
  echo "the sdist install: smoke subset FAILED" >&2
  exit 1
fi
grep -E "[0-9]+ (passed|failed)" "$log" | tail -n 1
RESULTS+=("sdist install (CPython $("$py" -c 'import platform; print(platform.python_version())')): smoke subset passed in $(since "$t") s")
else
  SDIST_TIME="not run (UG_SDIST=0)"
  SDIST_TARGET="-"
fi

step "summary"
echo "wheel: $(basename "$WHEEL") ($(du -k "$WHEEL" | cut -f1) KiB)"
echo "pip install: wheel $WHEEL_TIME s; sdist (from source, cargo target dir $SDIST_TARGET) $SDIST_TIME s"
printf '%s\n' "${RESULTS[@]}"
echo "wheels: ${#RESULTS[@]} passed, 0 failed"
