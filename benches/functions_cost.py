"""What a carried 6-rule admit + bill costs Redis as a function (`FCALL`, the default on Redis
7+) and by SHA (`EVALSHA`, `functions=False`'s path and a server without functions), in CPU
instructions under callgrind: a figure that does not move with the machine's load.

One redis-server runs under valgrind's callgrind, counting only inside `fcallCommand` and
`evalShaCommand`. The sync admit + bill of `benches/admit_bill.py` (6 rules; each bill
carried by the next reservation) runs N times through a store that calls functions and N
times through one made with `functions=False`, each call asking for a different max_tokens
(holds that differ, as in real traffic). Prints instructions per call each way and the
ratio.

With `--spread SECONDS`, the guard runs on a manual clock moved that far after each call, as
real calls spread over minutes: their holds fall in many minutes' fields of each counter's
holds hash, and the values the guard knows age between calls. Calls made back to back fall
in one minute and one second.

Run: .venv/bin/python benches/functions_cost.py [N] [--spread SECONDS]   (default 300 calls,
no spread; needs valgrind and redis-py, which `make bench` installs)
"""

from __future__ import annotations

import os
import re
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests_py"))
sys.path.insert(0, os.path.dirname(__file__))

import redis  # noqa: E402
import usage_guard as ug  # noqa: E402
from admit_bill import SIX_RULES  # noqa: E402
from lua_floor import under_callgrind  # noqa: E402

COUNTED = {"function": "fcallCommand", "by SHA": "evalShaCommand"}


def run(calls: int, spread: float = 0.0) -> dict[str, float]:
    """Instructions per admit + bill, each way, from one callgrind run; with `spread`, on a
    manual clock moved `spread` seconds after each call."""

    def drive(client: redis.Redis) -> None:
        port = client.connection_pool.connection_kwargs["port"]
        for way, functions in (("function", True), ("by SHA", False)):
            store = ug.RedisStore(
                f"redis://127.0.0.1:{port}", f"cost-{functions}", timeout=30, functions=functions
            )
            clock = ug.ManualClock() if spread else None
            guard = ug.Guard(ug.Policy.from_toml(SIX_RULES), store=store, clock=clock)
            for i in range(calls):
                ticket = guard.admit("alice", "gpt-5", prompt_tokens=1200, max_tokens=4000 + i % 7)
                ticket.bill(1100, 800 + i % 5)
                if clock is not None:
                    clock.advance(spread)
            guard.close()
            assert store.functions is functions, way

    _, listing = under_callgrind(drive, tuple(COUNTED.values()))
    per_call = {}
    for way, function in COUNTED.items():
        found = re.search(r"([\d,]+) \([\d.]+%\)\s+\S*:" + function + r"\b", listing)
        assert found, f"{function} not in the listing"
        per_call[way] = int(found.group(1).replace(",", "")) / calls
    return per_call


def main() -> None:
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    args = sys.argv[1:]
    spread = 0.0
    if "--spread" in args:
        at = args.index("--spread")
        spread = float(args[at + 1])
        del args[at : at + 2]
    calls = int(args[0]) if args else 300
    per_call = run(calls, spread)
    for way, instructions in per_call.items():
        print(f"{way:>9}: {instructions:>10,.0f} instructions per admit + bill")
    ratio = per_call["function"] / per_call["by SHA"]
    print(f"function / by SHA: {ratio:.3f}")


if __name__ == "__main__":
    main()
