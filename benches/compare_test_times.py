"""Compares pytest call times of the tests whose source is the same in two checkouts (issue
12's "no test slower"). Run each checkout's suite with
`pytest -p no:cacheprovider tests_py --durations=0 --durations-min=0 > FILE`, then:

    python benches/compare_test_times.py OLD_TREE OLD_FILE... -- NEW_TREE NEW_FILE...

Each test's call time is the best over its tree's files; a test counts as slower when it
takes more than 1.5 times as long and more than 50 ms more.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path


def test_sources(tree: str) -> dict[str, str]:
    """`tests_py/area/file.py::test_name` -> the test function's source text."""
    out: dict[str, str] = {}
    for path in Path(tree, "tests_py").rglob("test_*.py"):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name.startswith("test"):
                    source = ast.get_source_segment(text, node) or ""
                    out[f"{path.relative_to(tree).as_posix()}::{node.name}"] = source
    return out


def call_times(files: list[str]) -> dict[str, float]:
    """Each test id's best call time over the `--durations` outputs in `files`."""
    best: dict[str, float] = {}
    for name in files:
        for line in Path(name).read_text().splitlines():
            m = re.match(r"\s*([\d.]+)s call\s+(\S+)", line)
            if m:
                best[m.group(2)] = min(best.get(m.group(2), float("inf")), float(m.group(1)))
    return best


def main(args: list[str]) -> None:
    split = args.index("--")
    old_tree, old_files, new_tree, new_files = (
        args[0],
        args[1:split],
        args[split + 1],
        args[split + 2 :],
    )
    old_src, new_src = test_sources(old_tree), test_sources(new_tree)
    same = {k for k in old_src if new_src.get(k) == old_src[k]}
    old, new = call_times(old_files), call_times(new_files)
    rows = [(t, old[t], new[t]) for t in sorted(set(old) & set(new)) if t.split("[")[0] in same]
    old_sum, new_sum = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print(f"tests with the same source, timed in both: {len(rows)}")
    print(f"sum of call time: old {old_sum:.2f} s, new {new_sum:.2f} s")
    slower = [r for r in rows if r[2] > 1.5 * r[1] and r[2] - r[1] > 0.05]
    faster = [r for r in rows if r[1] > 1.5 * r[2] and r[1] - r[2] > 0.05]
    for label, moved in (("slower", slower), ("faster", faster)):
        print(f"{label} by more than 1.5x and 50 ms: {len(moved)}")
        for test, o, n in sorted(moved, key=lambda r: -abs(r[2] - r[1])):
            print(f"  {test}: {o:.3f} -> {n:.3f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
