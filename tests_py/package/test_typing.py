"""The guarded clients keep the SDK's types (python/usage_guard/openai.pyi, anthropic.pyi,
ollama.pyi): mypy sees each answer as the SDK's type with the guard's attributes and reports
a mistake on it, so the typing cannot silently fall back to `Any`; the typed example
(examples/typed_usage.py) runs against the fake provider with every SDK, so what the stubs
declare is there at run time; and every name a stub declares exists in its module.

The mypy run shares the project's cache (`.mypy_cache`, warm after `mypy --strict
python/usage_guard examples`). Under the wheel script the source tree's stubs were checked
already, on the dev build: skipped there."""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import ollama
import openai
import pytest
import usage_guard as ug
import usage_guard.anthropic
import usage_guard.ollama
import usage_guard.openai
from fake_provider import WORD, FakeProvider
from provider_support import policy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "typed_usage.py"
pytestmark = pytest.mark.skipif(
    os.environ.get("UG_WHEEL_TEST") == "1", reason="the stubs are checked on the source tree"
)

# Each line marked `# E: <code>` must be reported with that error code, and no other line.
MISTAKES = """
from openai import OpenAI
import anthropic, ollama
from usage_guard import Guard, Policy
from usage_guard.anthropic import GuardedAnthropic
from usage_guard.ollama import GuardedOllama
from usage_guard.openai import GuardedAsyncOpenAI, GuardedOpenAI

guard = Guard(Policy.from_dict({}))
client = GuardedOpenAI(OpenAI(api_key="sk"), guard, user="alice")
reply = client.chat.completions.create(model="gpt-4o", messages=[])
reveal_type(reply)
reply.choices[0].message.contnt  # E: attr-defined
reply.usage_limits["capd"]  # E: typeddict-item
reply.usage_billed["cost_micros"]  # E: index
client.chat.completions.create(model="gpt-4o", messages=[], max_tokns=5)  # E: call-overload
stream = client.chat.completions.create(model="gpt-4o", messages=[], stream=True)
reveal_type(stream)
for chunk in stream:
    chunk.choices[0].delta.contnt  # E: attr-defined
stream.usage_limits["capped"]  # E: index
client.models.lst()  # E: attr-defined
message = GuardedAnthropic(anthropic.Anthropic(api_key="sk"), guard).messages.create(
    model="claude-haiku-4-5", max_tokens=5, messages=[]
)
reveal_type(message)
message.usage.output_tokns  # E: attr-defined
local = GuardedOllama(ollama.Client(), guard).chat("llama3.2", messages=[])
reveal_type(local)
local.message.contnt  # E: attr-defined


async def later(a: GuardedAsyncOpenAI) -> None:
    answer = await a.chat.completions.create(model="gpt-4o", messages=[])
    answer.usage_limits["capped"] + ""  # E: operator
"""
REVEALED = [
    "usage_guard.openai.GuardedChatCompletion",
    "usage_guard.openai.GuardedStream[openai.types.chat.chat_completion_chunk.ChatCompletionChunk]",
    "usage_guard.anthropic.GuardedMessage",
    "usage_guard.ollama.GuardedChatResponse",
]


def test_mypy_sees_the_sdks_types_and_reports_mistakes(tmp_path: Path) -> None:
    mistakes = tmp_path / "mistakes.py"
    mistakes.write_text(textwrap.dedent(MISTAKES), encoding="utf-8")
    ran = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--show-error-codes", "--no-error-summary"]
        + [str(EXAMPLE), str(mistakes)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    out = ran.stdout + ran.stderr
    assert "typed_usage.py:" not in out, out  # the example checks clean
    lines = mistakes.read_text(encoding="utf-8").splitlines()
    expected = {
        (n, m.group(1)) for n, text in enumerate(lines, 1) if (m := re.search(r"# E: (\S+)", text))
    }
    reported = {
        (int(m.group(1)), m.group(2))
        for m in re.finditer(r"mistakes\.py:(\d+): error: .*\[([a-z-]+)\]$", out, re.M)
    }
    assert reported == expected, out
    revealed = re.findall(r'mistakes\.py:\d+: note: Revealed type is "([^"]+)"', out)
    assert revealed == REVEALED, out


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("typed_usage", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_typed_example_runs_with_every_sdk(fake: FakeProvider, make_guard: Any) -> None:
    """What the stubs declare is there: each answer carries the guard's attributes (those the
    call does not set are None), a stream has them None until it ends."""
    typed = load_example()
    guard = make_guard(policy())
    sdk = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="sk", max_retries=0)
    client = ug.openai.GuardedOpenAI(sdk, guard, user="alice")
    reply = typed.openai_chat(client, "gpt-4o")
    assert reply.choices[0].message.content == WORD * 12
    assert reply.usage_limits["capped"] is False and reply.usage_billed["output_tokens"] == 12
    assert (reply.usage_warnings, reply.usage_degraded, reply.usage_resolution) == ([], None, None)
    pending = client.chat.completions.create(model="gpt-4o", messages=[], stream=True)
    assert (pending.usage_limits, pending.usage_billed, pending.usage_warnings) == (None, None, [])
    assert pending.usage_resolution is None
    pending.close()
    text, limits = typed.openai_stream(client, "gpt-4o")
    assert text == WORD * 12 and limits is not None and limits["capped"] is False
    async_client = ug.openai.GuardedAsyncOpenAI(
        openai.AsyncOpenAI(base_url=f"{fake.url}/v1", api_key="sk", max_retries=0), guard, "bob"
    )
    assert asyncio.run(typed.openai_async(async_client, "gpt-4o")) == (WORD * 12, WORD * 12)

    messages = anthropic.Anthropic(base_url=fake.url, api_key="sk", max_retries=0)
    claude = ug.anthropic.GuardedAnthropic(messages, guard, user="alice")
    message = typed.anthropic_message(claude, "claude-haiku-4-5")
    assert message.usage_billed["output_tokens"] == 12 and message.usage_resolution is None
    text, stream = typed.anthropic_stream(claude, "claude-haiku-4-5")
    assert text == WORD * 12 and stream.usage_limits["capped"] is False
    async_claude = ug.anthropic.GuardedAsyncAnthropic(
        anthropic.AsyncAnthropic(base_url=fake.url, api_key="sk", max_retries=0), guard, "bob"
    )
    assert "message_stop" in asyncio.run(typed.anthropic_async(async_claude, "claude-haiku-4-5"))

    local = ug.ollama.GuardedOllama(ollama.Client(host=fake.url), guard, user="alice")
    answer = typed.ollama_chat(local, "llama3.2")
    assert answer.message.content == WORD * 12 and answer.usage_degraded is None
    async_local = ug.ollama.GuardedAsyncOllama(ollama.AsyncClient(host=fake.url), guard, "bob")
    assert asyncio.run(typed.ollama_stream_async(async_local, "llama3.2")) == WORD * 12


@pytest.mark.parametrize("name", ["openai", "anthropic", "ollama", "genai"])
def test_every_name_of_a_stub_exists_at_run_time(name: str) -> None:
    stub = ast.parse((ROOT / "python" / "usage_guard" / f"{name}.pyi").read_text("utf-8"))
    module = importlib.import_module(f"usage_guard.{name}")
    declared = [n.name for n in stub.body if isinstance(n, ast.ClassDef)]
    declared += [
        n.target.id
        for n in stub.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]
    public = [n for n in declared if not n.startswith("_")]
    assert public and [n for n in public if not hasattr(module, n)] == []
    (exported,) = [
        ast.literal_eval(n.value)
        for n in stub.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__"
    ]
    assert exported == module.__all__
