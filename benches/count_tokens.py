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


def growing_chat(docs: list[str], turns: int = 200) -> None:
    """An engine re-sends the whole conversation every turn: recount it each turn with
    `count_prompt` (per-message cache) and with tiktoken over every message (no cache)."""
    import tiktoken
    import usage_guard as ug

    enc = tiktoken.get_encoding("o200k_base")
    texts = [docs[i % len(docs)][:3000] + f" turn {i}" for i in range(turns)]
    roles = ["user", "assistant"]
    messages = [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]

    def ours() -> int:
        total = 0
        for turn in range(1, turns + 1):
            request = {"model": "gpt-5", "messages": messages[:turn]}
            total += ug.count_prompt(request, "openai", "gpt-5")["tokens"]
        return total

    def tiktoken_recount() -> int:
        total = 0
        for turn in range(1, turns + 1):
            total += sum(len(enc.encode_ordinary(m["content"])) for m in messages[:turn])
        return total

    ours_s, _ = best(ours, 1)
    theirs_s, _ = best(tiktoken_recount, 1)
    print(
        f"growing chat, {turns} turns recounted each turn: usage_guard {ours_s:.3f} s, "
        f"tiktoken recounting every message {theirs_s:.3f} s ({theirs_s / ours_s:.1f}x)"
    )


if __name__ == "__main__":
    main()
    growing_chat(corpus(0.5))
