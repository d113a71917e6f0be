"""A model engine that wraps its OpenAI client with usage_guard.

    pip install . openai    # from the checkout's root (`usage-guard` once it is on PyPI)
    OPENAI_API_KEY=... python examples/openai_engine.py alice "Write a haiku about budgets."

Any OpenAI-compatible server works: set OPENAI_BASE_URL (e.g. http://localhost:11434/v1).
"""

from __future__ import annotations

import sys
from pathlib import Path

import usage_guard as ug
from openai import OpenAI
from usage_guard.openai import GuardedOpenAI

# The five lines: a policy, a guard, and the client you already have, wrapped.
policy = ug.Policy.load(Path(__file__).with_name("policy.toml"))
guard = ug.Guard(policy)
client = GuardedOpenAI(OpenAI(), guard)


def ask(user: str, prompt: str, model: str = "gpt-5") -> str:
    """One call: admitted, fitted into what `user` has left, billed from the reported usage."""
    try:
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": prompt}], user=user
        )
    except ug.UsageLimitError as e:
        status, _headers, body = e.to_http("openai")  # what a gateway would answer
        return f"refused ({status}): {body['error']['message']}"
    text = reply.choices[0].message.content or ""
    if reply.usage_limits["capped"]:
        text += "\n[answer cut short: usage limit]"
    return text


if __name__ == "__main__":
    user = sys.argv[1] if len(sys.argv) > 1 else "alice"
    prompt = " ".join(sys.argv[2:]) or "Say hello."
    print(ask(user, prompt))
    print(guard.usage(user, "gpt-5")["restriction"])
