"""Every Python and shell block of README.md and docs/*.md runs as written, so no snippet can
rot: a doc's blocks run in order, as a reader would run them, in one scratch directory (with
`examples/` beside it) and one Python namespace per doc. Shell blocks (```sh, ```bash) run in
bash and must exit 0; ```console blocks run each `$ ` command and must print exactly the lines
under it. The `usage-guard` CLI is the real one, in its own process.

A block that needs more says so in an HTML comment right before it:

    <!-- snippet: redis -->            a new redis-server; `redis://` URLs in the block point to it
    <!-- snippet: postgres -->         a fresh PostgreSQL database; `postgres://` URLs point at it
    <!-- snippet: openai anthropic --> the SDKs' base URL and key point at the fake provider
    <!-- snippet: server -->           a shell block that starts a server: run until it prints its
                                       URL (`--listen` on a free port, `/var/lib/usage-guard/` in
                                       the scratch directory), then stopped with SIGTERM
    <!-- snippet: assert -->           the block's last expression must be true
    <!-- snippet: free-port N -->      the port number N in the block becomes a free port
    <!-- snippet: file NAME -->        (any block) written to NAME in the scratch directory;
                                       `<!-- check-sample: NAME -->` means the same
    <!-- snippet: run-by TEST -->      run, with its own assertions, by tests_py/TEST
    <!-- snippet: skip REASON -->      not run: only where running is impossible (few, counted)

Words combine (`<!-- snippet: redis openai -->`); lines after the first line of the comment are
Python run before the block, unseen by the reader (what an earlier page already set up).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import usage_guard as ug
from postgres_harness import pg_url  # noqa: F401  (the fixture, for `postgres` blocks)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
RUNNABLE = {"python", "sh", "bash", "console"}
WORDS = {"redis", "postgres", "openai", "anthropic", "server", "assert", "free-port", "file"}
WORDS |= {"run-by", "skip"}
# Blocks that cannot run in a test (installing from the network, the whole suite): kept few.
MAX_SKIPS = 3

FENCE = re.compile(r"^```(?P<lang>[\w-]*)[ \t]*\n(?P<code>.*?)^```[ \t]*$", re.S | re.M)
NOTE = re.compile(r"<!--\s*(?P<kind>snippet|check-sample):(?P<body>(?:(?!-->).)*)-->\s*\Z", re.S)
REDIS_URL = re.compile(r"redis://[\w.\-]+(?::\d+)?(?:/\d+)?")
POSTGRES_URL = re.compile(r"postgres(?:ql)?://[^\s\"']+")
LISTEN = re.compile(r"(--listen\s+)[\w.]+:\d+")


@dataclass
class Block:
    doc: str
    line: int
    lang: str
    code: str
    words: list[str] = field(default_factory=list)
    args: dict[str, str] = field(default_factory=dict)
    setup: str = ""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks(doc: str) -> list[Block]:
    """The fenced blocks of `doc` with the annotation right before each."""
    text = (ROOT / doc).read_text()
    found = []
    for m in FENCE.finditer(text):
        block = Block(doc, text.count("\n", 0, m.start()) + 2, m["lang"], m["code"])
        note = NOTE.search(text[max(0, m.start() - 2000) : m.start()])
        if note and note["kind"] == "check-sample":
            block.words, block.args["file"] = ["file"], note["body"].strip()
        elif note:
            first, _, block.setup = note["body"].partition("\n")
            words = first.split()
            while words:
                word = words.pop(0)
                assert word in WORDS, f"{block.where}: unknown snippet word {word!r}"
                block.words.append(word)
                if word in ("skip", "run-by"):
                    block.args[word] = " ".join(words)
                    words = []
                elif word in ("file", "free-port"):
                    block.args[word] = words.pop(0)
        found.append(block)
    return found


def every_block() -> list[Block]:
    return [b for doc in DOCS for b in blocks(doc)]


class Doc:
    """One doc's run: its scratch directory, its Python namespace, its servers."""

    def __init__(self, request: pytest.FixtureRequest, tmp: Path, mp: pytest.MonkeyPatch):
        self.request, self.dir, self.mp = request, tmp, mp
        self.ns: dict[str, Any] = {"__name__": "__snippet__"}
        self.redis_url = self.postgres_url = ""
        (tmp / "examples").symlink_to(ROOT / "examples")
        shutil.copy(ROOT / "examples" / "policy.toml", tmp / "policy.toml")
        bin_dir = str(Path(sys.executable).parent)
        mp.setenv("PATH", os.pathsep.join([bin_dir, os.environ.get("PATH", "")]))
        mp.chdir(tmp)

    def prepare(self, block: Block) -> str:
        code = block.code
        if "redis" in block.words:
            if not self.redis_url:
                self.redis_url = self.request.getfixturevalue("redis_server").url
            code = REDIS_URL.sub(self.redis_url, code)
        if "postgres" in block.words:
            if not self.postgres_url:
                self.postgres_url = self.request.getfixturevalue("pg_url")()
            code = POSTGRES_URL.sub(self.postgres_url, code)
        if {"openai", "anthropic"} & set(block.words):
            fake = self.request.getfixturevalue("fake")
            self.mp.setenv("OPENAI_BASE_URL", f"{fake.url}/v1")
            self.mp.setenv("OPENAI_API_KEY", "sk-snippet")
            self.mp.setenv("ANTHROPIC_BASE_URL", fake.url)
            self.mp.setenv("ANTHROPIC_API_KEY", "sk-ant-snippet")
        if "free-port" in block.words:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = str(s.getsockname()[1])
            code = re.sub(rf"\b{block.args['free-port']}\b", port, code)
        if "server" in block.words:
            code = LISTEN.sub(r"\g<1>127.0.0.1:0", code)
            code = code.replace("/var/lib/usage-guard/", f"{self.dir}/")
        return code

    def run(self, block: Block) -> None:
        if "file" in block.words:
            (self.dir / block.args["file"]).write_text(block.code)
            return
        code = self.prepare(block)
        if block.setup:
            exec(compile(block.setup, f"{block.where} (setup)", "exec"), self.ns)
        if block.lang == "python":
            self.python(block, code)
        elif "server" in block.words:
            self.server(block, code)
        elif block.lang == "console":
            self.console(block, code)
        else:
            done = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", code],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, (block.where, done.stdout, done.stderr)

    def python(self, block: Block, code: str) -> None:
        tree = ast.parse(code, block.where)
        if "assert" in block.words:
            last = tree.body[-1]
            assert isinstance(last, ast.Expr), f"{block.where}: `assert` needs a last expression"
            tree.body[-1] = ast.fix_missing_locations(
                ast.copy_location(ast.Assert(test=last.value), last)
            )
        exec(compile(tree, block.where, "exec"), self.ns)

    def console(self, block: Block, code: str) -> None:
        for command, expected in commands(code):
            done = subprocess.run(
                ["bash", "-c", command], capture_output=True, text=True, timeout=60
            )
            assert done.stdout == expected, (block.where, command, done.stderr)
            head = expected.splitlines()[0] if expected else ""
            failed = head.endswith(("error", "errors", "(--strict: failing)"))
            assert done.returncode == (1 if failed else 0), (block.where, command, done.stderr)

    def server(self, block: Block, code: str) -> None:
        proc = subprocess.Popen(
            ["bash", "-e", "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            assert proc.stdout is not None
            seen = []
            for line in proc.stdout:
                seen.append(line)
                if re.search(r"http://127\.0\.0\.1:\d+", line):
                    break
            assert proc.poll() is None, (block.where, "".join(seen))
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)

    def close(self) -> None:
        for value in list(self.ns.values()):
            if isinstance(value, ug.Guard):
                value.close()


def commands(code: str) -> list[tuple[str, str]]:
    """A console block's `$ ` commands, each with the output lines under it."""
    found: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            found.append((line[2:], []))
        else:
            assert found, f"console output before any command: {line!r}"
            found[-1][1].append(line)
    return [(c, "".join(f"{ln}\n" for ln in out)) for c, out in found]


@pytest.mark.parametrize("doc", DOCS)
def test_every_snippet_runs_as_written(
    doc: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = Doc(request, tmp_path, monkeypatch)
    try:
        for block in blocks(doc):
            runnable = block.lang in RUNNABLE or "file" in block.words
            if not runnable or "skip" in block.words or "run-by" in block.words:
                continue
            run.run(block)
    finally:
        run.close()


def test_skips_are_few_and_say_why() -> None:
    skipped = [b for b in every_block() if "skip" in b.words]
    assert len(skipped) <= MAX_SKIPS, [b.where for b in skipped]
    for b in skipped:
        assert len(b.args["skip"].split()) >= 3, f"{b.where}: a skip says why"
        assert b.lang in RUNNABLE, f"{b.where}: only runnable blocks need a skip"


def test_blocks_run_elsewhere_are_run_there() -> None:
    for b in every_block():
        if "run-by" in b.words:
            test = ROOT / "tests_py" / b.args["run-by"]
            assert test.is_file(), f"{b.where}: {test} does not exist"
            assert b.doc in test.read_text(), f"{b.where}: {test.name} does not read {b.doc}"


def test_every_snippet_is_found() -> None:
    """The fence pattern finds the blocks a reader sees: every runnable block of the docs is
    one it runs, one it skips, or one another test runs."""
    by_lang: dict[str, int] = {}
    for b in every_block():
        by_lang[b.lang] = by_lang.get(b.lang, 0) + 1
    assert by_lang.get("python", 0) >= 10 and by_lang.get("sh", 0) >= 5, by_lang
    fences = sum(
        len(re.findall(r"^```(?:python|sh|bash|console)[ \t]*$", (ROOT / d).read_text(), re.M))
        for d in DOCS
    )
    assert fences == sum(by_lang.get(lang, 0) for lang in RUNNABLE)


def test_relative_links_resolve() -> None:
    """Every relative link of the docs names a file that exists (and a heading in it)."""

    def anchors(path: Path) -> set[str]:
        heads = [ln.lstrip("#").strip() for ln in path.read_text().splitlines() if ln[:1] == "#"]
        return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}

    broken = []
    for doc in DOCS:
        for link in re.findall(r"\]\(([^)\s]+)\)", (ROOT / doc).read_text()):
            if re.match(r"\w+:", link):
                continue
            path, _, anchor = link.partition("#")
            target = (ROOT / doc).parent / path if path else ROOT / doc
            if not target.exists():
                broken.append(f"{doc}: {link}")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                broken.append(f"{doc}: {link} (no such heading)")
    assert not broken, broken
