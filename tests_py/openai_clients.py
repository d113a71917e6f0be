"""Guarded OpenAI clients on the fake provider for alice, and a resource by its dotted path:
what the OpenAI wrapper tests share."""

from __future__ import annotations

from typing import Any

import openai
import usage_guard as ug
from fake_provider import FakeProvider
from usage_guard.openai import GuardedAsyncOpenAI, GuardedOpenAI


def sync_client(fake: FakeProvider, guard: ug.Guard) -> GuardedOpenAI:
    sdk = openai.OpenAI(base_url=f"{fake.url}/v1", api_key="k", max_retries=0)
    return GuardedOpenAI(sdk, guard, user="alice")


def async_client(fake: FakeProvider, guard: ug.Guard) -> GuardedAsyncOpenAI:
    sdk = openai.AsyncOpenAI(base_url=f"{fake.url}/v1", api_key="k", max_retries=0)
    return GuardedAsyncOpenAI(sdk, guard, user="alice")


def resource(client: Any, path: str) -> Any:
    """`client`'s attribute at `path` ("chat.completions.with_raw_response")."""
    for name in path.split("."):
        client = getattr(client, name)
    return client
