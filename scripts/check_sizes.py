#!/usr/bin/env python3
"""Reports the house size limits: every Rust function over 80 lines and every .rs/.py file
over 400 lines under src/ and python/. Exits 1 if anything is reported, 0 otherwise.

Usage: python3 scripts/check_sizes.py [ROOT ...]   (default: src python, from the repo root)

Rust functions are found by their `fn` signature and measured by matching braces, skipping
strings, raw strings, char literals and comments; a function is counted from its `fn` line to
its closing brace. Python functions are measured with `ast` (the `def` line to the body's
last line, decorators excluded).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

MAX_FILE_LINES = 400
MAX_FN_LINES = 80
REPO = Path(__file__).resolve().parent.parent
DEFAULT_ROOTS = ("src", "python")

FN_START = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def rust_code_mask(text: str) -> str:
    """The text with strings, chars and comments blanked (newlines kept), so braces and
    `fn` found in the result are code."""
    out = list(text)
    i, n = 0, len(text)

    def blank(start: int, end: int) -> None:
        for k in range(start, min(end, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end == -1 else end
            blank(i, end)
            i = end
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (
            i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            close = '"' + m.group(1)
            end = text.find(close, m.end())
            end = n if end == -1 else end + len(close)
            blank(i, end)
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}') or a lifetime ('a): only chars close.
            m = re.compile(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'").match(text, i)
            if m:
                blank(i, m.end())
                i = m.end()
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def rust_long_functions(text: str) -> list[tuple[str, int, int]]:
    """(name, first line, length in lines) of each function with a body over the limit."""
    code = rust_code_mask(text)
    found = []
    for m in FN_START.finditer(code):
        # The body opens at the first `{` after the signature; a `;` first means no body
        # (a trait method's declaration). Generic bounds and `where` clauses hold no braces.
        j = m.end()
        depth_paren = 0
        while j < len(code):
            ch = code[j]
            if ch in "([":
                depth_paren += 1
            elif ch in ")]":
                depth_paren -= 1
            elif ch == ";" and depth_paren == 0:
                j = -1
                break
            elif ch == "{" and depth_paren == 0:
                break
            j += 1
        if j < 0 or j >= len(code):
            continue
        depth, k = 0, j
        while k < len(code):
            if code[k] == "{":
                depth += 1
            elif code[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        start_line = code.count("\n", 0, m.start()) + 1
        end_line = code.count("\n", 0, k) + 1
        length = end_line - start_line + 1
        if length > MAX_FN_LINES:
            found.append((m.group(1), start_line, length))
    return found


def python_long_functions(text: str, path: Path) -> list[tuple[str, int, int]]:
    try:
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as e:
        raise SystemExit(f"{path}: cannot parse: {e}") from e
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FN_LINES:
                found.append((node.name, node.lineno, length))
    return found


def check(roots: list[Path]) -> list[str]:
    problems = []
    for root in roots:
        files = sorted(p for p in root.rglob("*") if p.suffix in (".rs", ".py") and p.is_file())
        for path in files:
            text = path.read_text(encoding="utf-8")
            shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
            lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
            if lines > MAX_FILE_LINES:
                problems.append(f"{shown}: file has {lines} lines (max {MAX_FILE_LINES})")
            if path.suffix == ".rs":
                long_fns = rust_long_functions(text)
            else:
                long_fns = python_long_functions(text, path)
            for name, line, length in long_fns:
                problems.append(
                    f"{shown}:{line}: function {name} has {length} lines (max {MAX_FN_LINES})"
                )
    return problems


def main(argv: list[str]) -> int:
    roots = [Path(a).resolve() for a in argv] or [REPO / r for r in DEFAULT_ROOTS]
    for root in roots:
        if not root.is_dir():
            print(f"check_sizes: {root} is not a directory", file=sys.stderr)
            return 2
    problems = check(roots)
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
