#!/usr/bin/env bash
# Builds the release wheel (one abi3 wheel for CPython >= 3.9) and the sdist into dist/ with
# maturin, then prints the wheel's tag, size and contents. `make wheel` runs it.
#
# The platform tag is maturin's default: it audits the extension's glibc symbol versions (as
# auditwheel does) and gives the lowest manylinux_2_X tag they allow; the build fails if the
# extension links a library outside the manylinux set. Cargo's target dir is CARGO_TARGET_DIR
# (default target/); a second run with unchanged sources only re-packs.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# 1.9.3+: PEP 639 license-files (LICENSE in the wheel's dist-info and in the sdist)
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.9.4,<2"

rm -f dist/usage_guard-*.whl dist/usage_guard-*.tar.gz
"$VENV/bin/maturin" build --release --sdist --out dist 2>&1 | grep -v '^\s*Compiling ' >&2

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
