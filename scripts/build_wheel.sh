#!/usr/bin/env bash
# Builds the release wheel (one abi3 wheel for CPython >= 3.9) and the sdist into dist/ with
# maturin, then prints the wheel's tag, size and contents. `make wheel` runs it.
#
# The platform tag is manylinux2014 (manylinux_2_17: glibc 2.17 or later, so nearly every
# x86-64 Linux in use). Linked against this machine's glibc (2.36) the extension would need
# glibc 2.34 (pthread_* and dl* moved into libc then), and maturin's auditwheel check would
# give manylinux_2_34. So it is linked with zig (the `ziglang` package from PyPI) against
# glibc 2.17's symbols; maturin still audits the result and fails on anything newer or on a
# library outside the manylinux set. UG_ZIG=0 builds with the system linker instead
# (manylinux_2_34 here). Cargo's target dir is CARGO_TARGET_DIR (default target/).
#
# UG_WHEEL_PROFILE=dev builds the same wheel (same features, abi3) in cargo's dev profile with
# the system linker: it reuses what `maturin develop` compiled, so `make test` can test a wheel
# on every Python without a second cold compile of the core (minutes on 2 cores). Ship only
# the release wheel.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# 1.9.3+: PEP 639 license-files (LICENSE in the wheel's dist-info and in the sdist)
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.9.4,<2"
ZIG=(--zig --compatibility manylinux2014)
PROFILE=(--release)
if [ "${UG_WHEEL_PROFILE:-release}" = dev ]; then
  PROFILE=(--profile dev)
  UG_ZIG=0
fi
if [ "${UG_ZIG:-1}" = 0 ]; then
  ZIG=()
else
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "ziglang>=0.13,<0.18"  # tested: 0.17.1
fi

rm -f dist/usage_guard-*.whl dist/usage_guard-*.tar.gz
# The wheel is built from the checkout, not from the unpacked sdist: cargo would take the
# sdist's files (a new temporary path, old mtimes) for unchanged and reuse a stale core.
"$VENV/bin/maturin" sdist --out dist 2>&1 | grep -v '^\s*Compiling ' >&2
# maturin finds zig as `python -m ziglang` with the python first on the PATH: the venv's
PATH="$(cd "$VENV" && pwd)/bin:$PATH" "$VENV/bin/maturin" build "${PROFILE[@]}" "${ZIG[@]}" \
  --out dist 2>&1 | grep -v '^\s*Compiling ' >&2

"$VENV/bin/python" - <<'EOF'
import glob, os, zipfile

wheel, = glob.glob("dist/usage_guard-*.whl")
sdist, = glob.glob("dist/usage_guard-*.tar.gz")
print(f"wheel: {wheel}  ({os.path.getsize(wheel) / 1e6:.2f} MB)")
print(f"sdist: {sdist}  ({os.path.getsize(sdist) / 1e6:.2f} MB)")
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        print(f"  {info.file_size:>11,} B  ({info.compress_size:>10,} B zipped)  {info.filename}")
EOF
