#!/usr/bin/env python3
"""Checks the crate's layering: every `crate::…` / `super::…` path in a Rust source file is
resolved to the file it names; a file may only use files of its own layer or the layers
below it (domain ← ceiling ← store, ledger ← engine ← gateway, py), and no two files may
import each other, directly or through others; inside the engine, a room may only use
files of its own room, of a peer or of the rooms below it (observe ← settle, fence ← reserve
← admit ← batch: admission reserves, nothing below admits, observe calls no other room;
settle and fence are peers: a ticket registers with the fence, the fence builds tickets,
and the file cycle check keeps them from calling each other in a circle), and no room
uses `engine/guard.rs` (it delegates to them); no two files of one layer share a name; and
no file may use `parking_lot` (its wait table is not safe across `fork()`: src/lock.rs).
Prints each violation; exits 1 if any."""

from __future__ import annotations

import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

# Lower number = lower layer. Files at the crate root (error, runtime, lib) are shared base.
LAYERS = [
    ("guard/domain/", 1),
    ("ceiling/", 2),
    ("guard/store/", 3),
    ("guard/ledger/", 3),
    ("guard/engine/", 4),
    ("gateway/", 5),
    ("py/", 5),
]


# The engine's rooms and their rank, lowest first (peers share a rank). `shared.rs` (the
# state every room reads), `handle.rs` (the Guard type), `quota.rs` and `guard.rs` (the
# public surface, on top) are in no room.
ENGINE = "guard/engine/"
ROOMS = {"observe": 0, "settle": 1, "fence": 1, "reserve": 2, "admit": 3, "batch": 4}


def room(rel: str) -> str | None:
    if not rel.startswith(ENGINE):
        return None
    parts = rel[len(ENGINE):].split("/")
    if len(parts) > 1 and parts[0] in ROOMS:
        return parts[0]
    return None


def room_problems(rel: str, deps: set[str]) -> list[str]:
    here = room(rel)
    if here is None:
        return []
    out = []
    for dep in sorted(deps):
        there = room(dep)
        if dep == ENGINE + "guard.rs":
            out.append(f"room: {rel} ({here}) uses {dep} (the public surface sits above the rooms)")
        elif there is not None and ROOMS[there] > ROOMS[here]:
            out.append(f"room: {rel} ({here}) uses {dep} ({there}, a room above it)")
    return out


def layer(rel: str) -> int:
    for prefix, n in LAYERS:
        if rel.startswith(prefix):
            return n
    if rel in ("lib.rs", "guard/mod.rs"):
        return 9  # the crate root re-exports everything
    if rel == "error.rs":
        return 1  # the crate's error type carries a domain refusal
    return 0  # runtime.rs: the shared tokio runtime, no imports


def module_file(parts: list[str]) -> str | None:
    """The file of the longest module prefix of `parts` (a path from the crate root)."""
    for n in range(len(parts), 0, -1):
        base = SRC.joinpath(*parts[:n])
        for cand in (base.with_suffix(".rs"), base / "mod.rs"):
            if cand.is_file():
                return str(cand.relative_to(SRC))
    return None


def module_path(rel: str) -> list[str]:
    p = rel[:-3].split("/")
    if p[-1] in ("mod", "lib"):
        p = p[:-1]
    return p


def strip_comments(text: str) -> str:
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def references(rel: str, text: str) -> set[str]:
    here = module_path(rel)
    out: set[str] = set()
    body = strip_comments(text)
    # `use a::{b, c::{d}}` groups: expand one level of braces to catch `super::{x, y}`.
    for m in re.finditer(r"\b(crate|super)((?:::super)*)::\{([^{}]*)\}", body):
        ups = 1 + m.group(2).count("super") if m.group(1) == "super" else None
        for item in m.group(3).split(","):
            name = item.strip().split("::")[0].split(" ")[0]
            if name and name not in ("self", "*"):
                base = [] if ups is None else here[: len(here) - ups]
                out.add("/".join(base + [name]))
    for m in re.finditer(r"\b(crate|super)((?:::super)*)((?:::[a-z_][a-z0-9_]*)+)", body):
        names = [n for n in m.group(3).split("::") if n]
        if m.group(1) == "crate":
            base: list[str] = []
        else:
            ups = 1 + m.group(2).count("super")
            base = here[: len(here) - ups]
        out.add("/".join(base + names))
    files = set()
    for ref in out:
        f = module_file(ref.split("/")) if ref else None
        if f and f != rel:
            files.add(f)
    return files


def main() -> int:
    graph: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.rs")):
        rel = str(path.relative_to(SRC))
        graph[rel] = references(rel, path.read_text())
    problems = []
    for path in sorted(SRC.rglob("*.rs")):
        if re.search(r"\bparking_lot::", strip_comments(path.read_text())):
            problems.append(f"lock: {path.relative_to(SRC)} uses parking_lot (use crate::lock)")
    for rel, deps in graph.items():
        if rel.endswith("mod.rs") or rel == "lib.rs":
            continue  # module roots declare and re-export their children
        for dep in deps:
            if layer(dep) > layer(rel):
                problems.append(f"layer: {rel} (layer {layer(rel)}) uses {dep} (layer {layer(dep)})")
        problems.extend(room_problems(rel, deps))
    # One name, one file in a layer: two files of one name in a layer read as one concept.
    seen: dict[tuple[int, str], str] = {}
    for rel in sorted(graph):
        name = rel.rsplit("/", 1)[-1]
        if name == "mod.rs" or layer(rel) == 9:
            continue
        other = seen.setdefault((layer(rel), name), rel)
        if other != rel:
            problems.append(f"name: {rel} and {other} share a name in layer {layer(rel)}")
    # Cycles between files (module roots excluded: they only declare and re-export).
    nodes = {r: {d for d in ds if not d.endswith("mod.rs") and d != "lib.rs"}
             for r, ds in graph.items() if not r.endswith("mod.rs") and r != "lib.rs"}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for d in sorted(nodes.get(n, ())):
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                problems.append("cycle: " + " -> ".join(cycle))
            elif d not in state:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in sorted(nodes):
        if n not in state:
            visit(n)
    for p in problems:
        print(p)
    print(f"check_layers: {len(nodes)} files, {sum(map(len, nodes.values()))} imports, "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
