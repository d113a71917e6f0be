"""The smoke subset `scripts/test_wheels.sh` runs on every supported CPython against the
installed wheel: import, `usage-guard demo`, a GuardedOpenAI call against the fake provider,
an asyncio admission, and the Redis store. It is part of the full suite too.

Under the wheel script (`UG_WHEEL_TEST=1`) it also checks that the package imported is the
installed one, not the checkout's `python/` tree, and that no Rust toolchain is reachable."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import usage_guard as ug
from fake_provider import WORD, FakeProvider
from provider_support import policy, reserved, used
from redis_harness import BUDGET_POLICY, RedisServer

UNDER_WHEEL_SCRIPT = os.environ.get("UG_WHEEL_TEST") == "1"
CHECKOUT = Path(__file__).resolve().parents[2]


def test_import_the_compiled_core() -> None:
    package = Path(ug.__file__).resolve().parent
    assert ug.__version__ == metadata.version("usage-guard")
    assert (package / "py.typed").is_file()
    stubs = ("_core.pyi", "_answers.pyi", "openai.pyi", "anthropic.pyi", "ollama.pyi", "genai.pyi")
    assert [s for s in stubs if not (package / s).is_file()] == []
    assert ug.count_tokens("hello world", "o200k_base") == 2
    if UNDER_WHEEL_SCRIPT:
        # the wheel's stable-ABI extension, installed in the virtualenv's site-packages
        assert not package.is_relative_to(CHECKOUT)
        assert Path(ug._core.__file__).name.endswith(".abi3.so")
        assert Path(sys.prefix) in package.parents


@pytest.mark.skipif(not UNDER_WHEEL_SCRIPT, reason="only under scripts/test_wheels.sh")
def test_no_rust_toolchain_is_reachable() -> None:
    for tool in ("cargo", "rustc", "rustup"):
        assert shutil.which(tool) is None, f"{tool} is on the PATH: {shutil.which(tool)}"


def test_usage_guard_demo() -> None:
    script = Path(sys.executable).parent / "usage-guard"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "usage_guard.cli"]
    if UNDER_WHEEL_SCRIPT:
        assert script.exists(), "the wheel installs the usage-guard console script"
    done = subprocess.run([*command, "demo"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"usage_guard {ug.__version__}" in done.stdout


def test_guarded_openai_call(fake: FakeProvider, make_guard) -> None:
    import openai
    from usage_guard.openai import GuardedOpenAI

    guard = make_guard(policy())
    sdk = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk-test", max_retries=0)
    client = GuardedOpenAI(sdk, guard, user="alice")
    reply = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Hi"}], max_tokens=100
    )
    assert reply.choices[0].message.content == WORD * 12
    assert used(guard, "alice", "gpt-4o") == 21 + 12
    assert reserved(guard, "alice", "gpt-4o") == 0
    assert reply.usage_limits["source"] == {"type": "direct", "id": "alice"}


async def test_asyncio_admission(make_guard) -> None:
    guard = make_guard(policy(tokens_a_day=1_000))
    ticket = await guard.admit_async("alice", "gpt-4o", prompt_tokens=100, max_tokens=400)
    assert ticket.ceiling["tokens"] == 500
    others = await asyncio.gather(
        *(guard.admit_async("alice", "gpt-4o", prompt_tokens=10, max_tokens=10) for _ in range(2))
    )
    billed = await ticket.bill_async(input_tokens=100, output_tokens=50)
    assert billed is not None and billed["output_tokens"] == 50
    assert await asyncio.gather(*(t.release_async() for t in others)) == [True, True]
    assert used(guard, "alice", "gpt-4o") == 150 and reserved(guard, "alice", "gpt-4o") == 0
    await (await guard.admit_async("alice", "gpt-4o", max_tokens=850)).bill_async(0, 850)
    with pytest.raises(ug.UsageLimitError) as refused:
        await guard.admit_async("alice", "gpt-4o", prompt_tokens=10)
    assert refused.value.limit_type == "direct"


def test_redis_store(clock: ug.ManualClock) -> None:
    server = RedisServer()
    try:
        policy_ = ug.Policy.from_dict(BUDGET_POLICY)
        a = ug.Guard(policy_, store=ug.RedisStore(server.url, prefix="smoke"), clock=clock)
        b = ug.Guard(policy_, store=ug.RedisStore(server.url, prefix="smoke"), clock=clock)
        ticket = a.admit("alice", "gpt-5", prompt_tokens=100, max_tokens=400)
        assert b.usage("alice", "gpt-5")["rules"][0]["reserved"] == 500
        ticket.bill(input_tokens=100, output_tokens=50, wait=True)
        assert b.usage("alice", "gpt-5")["rules"][0]["used"] == 150
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("module", "package", "extra"),
    [
        ("usage_guard.genai", "google.genai", "genai"),
        ("usage_guard.otel", "opentelemetry", "otel"),
        ("usage_guard.litellm", "litellm", "litellm"),
    ],
)
def test_an_optional_module_without_its_package_names_the_extra(
    module: str, package: str, extra: str
) -> None:
    # A fresh interpreter where the optional package cannot be imported (installed or not).
    code = (
        f"import sys; sys.modules[{package!r}] = None\n"
        f"try:\n    import {module}\n"
        "except ImportError as e:\n    print(e)\nelse:\n    print('imported')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"pip install 'usage-guard[{extra}]'" in done.stdout, done.stdout
