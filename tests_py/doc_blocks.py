"""The Python blocks of a doc that a test runs itself (`<!-- snippet: run-by TEST -->`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(
    r"<!-- snippet: run-by (?P<test>\S+) -->\s*\n```(?P<lang>[\w-]*)\n(?P<code>.*?)^```",
    re.S | re.M,
)


def run_by(doc: str, test: str, lang: str = "python") -> list[str]:
    """The `lang` blocks (Python unless said) of `doc` (a path from the repository's root)
    marked as run by `test`."""
    text = (ROOT / doc).read_text()
    return [m["code"] for m in BLOCK.finditer(text) if m["test"] == test and m["lang"] == lang]
