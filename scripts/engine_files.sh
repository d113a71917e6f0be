#!/usr/bin/env bash
# The files under src/guard/engine/ whose functions run during one admission (an OpenAI chat
# request, a Direct Limit of two rules, the memory store, after a first call warmed the path)
# and during its bill: tests/it/engine_walk.rs run under valgrind's callgrind, collecting only
# inside `walk_admit`, then only inside `walk_bill`. Debug build (nothing inlined away).
# Issue 33's bound: at most 8 files each. Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(cargo test --quiet --test it --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "it" and m.get("executable"):
        print(m["executable"])')
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for walk in walk_admit walk_bill; do
  valgrind --tool=callgrind --callgrind-out-file="$out/$walk" --toggle-collect="*engine_walk::$walk*" \
    "$bin" --ignored --exact engine_walk::one_admission_and_one_bill --test-threads=1 >/dev/null 2>&1
  files=$(callgrind_annotate --inclusive=no --threshold=100 "$out/$walk" 2>/dev/null \
    | grep -o 'src/guard/engine/[A-Za-z0-9_/]*\.rs' | sort -u)
  echo "$walk: $(echo "$files" | grep -c .) engine files"
  echo "$files" | sed 's/^/  /'
done
