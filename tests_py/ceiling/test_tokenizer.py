"""Token counts against Python tiktoken itself: every document of the benchmark corpora
(prose, code, CJK with emoji), the shapes that stress tiktoken's split (whitespace and digit
runs, contractions, marks, mixed scripts, very long words), lone and paired surrogates, and
random text. tiktoken reads the encodings tiktoken-rs embeds (written into a private cache
by benches/count_tokens.py's seed_tiktoken_cache): nothing is downloaded."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
import usage_guard as ug
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benches"))
import count_tokens as corpora  # noqa: E402

ENCODINGS = ("o200k_base", "cl100k_base")


@pytest.fixture(scope="module")
def tiktoken_encodings() -> dict[str, Any]:
    corpora.seed_tiktoken_cache()
    import tiktoken

    return {name: tiktoken.get_encoding(name) for name in ENCODINGS}


def reference(encs: dict[str, Any], name: str, text: str) -> int:
    return len(encs[name].encode_ordinary(text))


@pytest.mark.parametrize(
    "corpus",
    [corpora.prose_corpus, corpora.code_corpus, corpora.cjk_corpus],
    ids=lambda corpus: corpus.__name__,
)
def test_every_corpus_document_counts_as_tiktoken(
    tiktoken_encodings: dict[str, Any], corpus: Any
) -> None:
    docs = corpus(0.3)
    assert len(docs) >= 25
    for name in ENCODINGS:
        ours = [ug.count_tokens(d, name) for d in docs]
        assert ours == [reference(tiktoken_encodings, name, d) for d in docs], name


HARD = [
    " " * 3000,
    "a" + " " * 999 + "b\n" + "\t " * 500 + "\n",
    "\n\n\r\n  \u00a0\u3000x\u2028y \n" * 200,
    "1234567890" * 500 + " 3.14159 1,000,000 \u00b2\u00b3 \u216b \u0663\u0664\u0665",
    "I'm sure they'LL say it's 'S fine, we've DONE'T x'\u017f" * 50,
    "e\u0301\u0301 \u0301x .\u0301 CamelCase HTTPServer \u01c5emal \u02b0mod" * 40,
    "東京タワー 서울 🙂🚀 👩\u200d💻 ❤\ufe0f データ用户限额" * 60,
    "supercalifragilisticexpialidocious" * 600,
    "a/b//c\n/ ./ ?!\n\n<|endoftext|> <|fim_prefix|>" * 100,
    "",
]


@pytest.mark.parametrize("text", HARD, ids=range(len(HARD)))
def test_hard_shapes_count_as_tiktoken(tiktoken_encodings: dict[str, Any], text: str) -> None:
    for name in ENCODINGS:
        assert ug.count_tokens(text, name) == reference(tiktoken_encodings, name, text), name


def test_surrogates_count_as_tiktoken(tiktoken_encodings: dict[str, Any]) -> None:
    """tiktoken re-reads a str that UTF-8 cannot hold through UTF-16 with replacement: a
    lone surrogate becomes U+FFFD, a surrogate pair its character."""
    for text in ["a\ud800b", "\udfff", "x\ud83d\ude00y", "\ud83d\ude00\ud800 tail"]:
        for name in ENCODINGS:
            assert ug.count_tokens(text, name) == reference(tiktoken_encodings, name, text)
    assert ug.count_tokens("\ud83d\ude00") == ug.count_tokens("\U0001f600")


TRICKY = "aZéÉǅʰ東タ\u0301\u09031²Ⅻ٣ \t\n\r\u00a0\u3000\u2028'sSſtrelLvmd/.!😀\u200d\ufe0f_-"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.text(alphabet=TRICKY, max_size=60)))
def test_random_text_counts_as_tiktoken(tiktoken_encodings: dict[str, Any], text: str) -> None:
    for name in ENCODINGS:
        assert ug.count_tokens(text, name) == reference(tiktoken_encodings, name, text), name
