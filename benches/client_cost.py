"""What one Redis admit + bill costs the guard's own process, in CPU instructions: a figure
that does not move with the machine's load (the client's µs at 64 asyncio callers move by
±15 % between runs on a shared VM).

It runs `--calls` and then 4× as many sync admit + bill calls on the 6-rule path of
`benches/admit_bill.py` against a local redis-server, each in a Python process under
valgrind's callgrind, and prints the difference in instructions per call (every thread of
the process, user space: Python, the extension, libc; the kernel's work is not counted).
With `--top N`, the N functions that grew most per call.

Run: PYTHONPATH=<a build> .venv/bin/python benches/client_cost.py [--calls N] [--top N]
Needs `valgrind` (apt-get install valgrind) and redis-server.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests_py"))

from redis_harness import RedisServer  # noqa: E402

LOOP = """
import sys
sys.path.insert(0, {benches!r})
import usage_guard as ug
from admit_bill import SIX_RULES
store = ug.RedisStore({url!r}, "client_cost")
guard = ug.Guard(ug.Policy.from_toml(SIX_RULES), store=store)
for _ in range({calls}):
    ticket = guard.admit("alice", "gpt-5", prompt_tokens=1200, max_tokens=4000)
    ticket.bill(1100, 800)
guard.close()
"""


def functions(out_file: str) -> tuple[int, dict[str, int]]:
    """(total instructions, instructions per function) of a callgrind output file."""
    listing = subprocess.run(
        ["callgrind_annotate", "--threshold=100", out_file], capture_output=True, text=True
    ).stdout
    total, per = 0, {}
    for line in listing.splitlines():
        found = re.match(r"^\s*([\d,]+) \([^)]*\)\s+(.*)$", line)
        if not found:
            continue
        count = int(found.group(1).replace(",", ""))
        if "PROGRAM TOTALS" in found.group(2):
            total = count
        else:
            name = found.group(2).split(" [")[0].split(":", 1)[-1]
            per[name] = per.get(name, 0) + count
    return total, per


def run(url: str, calls: int, folder: str) -> tuple[int, dict[str, int]]:
    """`calls` admit + bill in a new Python process under callgrind: `functions` of it."""
    script = os.path.join(folder, f"loop{calls}.py")
    with open(script, "w") as f:
        f.write(
            LOOP.format(benches=os.path.dirname(os.path.abspath(__file__)), url=url, calls=calls)
        )
    out = os.path.join(folder, f"callgrind.{calls}")
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, script],
        check=True,
        capture_output=True,
    )
    return functions(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100, help="calls of the shorter run")
    parser.add_argument("--top", type=int, default=0, help="print the N functions grown most")
    args = parser.parse_args()
    server = RedisServer()
    try:
        with tempfile.TemporaryDirectory() as folder:
            short_total, short = run(server.url, args.calls, folder)
            long_total, long = run(server.url, 4 * args.calls, folder)
    finally:
        server.stop()
    extra = 3 * args.calls
    print(f"{(long_total - short_total) / extra:,.0f} instructions per admit + bill (client)")
    grown = {name: (long.get(name, 0) - short.get(name, 0)) / extra for name in long}
    for name, each in sorted(grown.items(), key=lambda item: -item[1])[: args.top]:
        print(f"  {each:>10,.0f}  {name[:110]}")


if __name__ == "__main__":
    main()
