"""The gateway's policy sections: `[providers.*]` and `[gateway]` (keys, bounds), with the
same closed vocabulary and error paths as the rest of the policy."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import usage_guard as ug

MODELS = {"gpt-4o": {"provider": "openai"}}
DIGEST = hashlib.sha256(b"sk-bob").hexdigest()


def errors(document: dict[str, Any]) -> list[tuple[str, str, str]]:
    with pytest.raises(ug.PolicyError) as info:
        ug.Policy.from_dict(document)
    return [(e["path"], e["value"], e["message"]) for e in info.value.errors]


def test_a_valid_gateway_policy():
    ug.Policy.from_dict(
        {
            "models": MODELS,
            "teams": {"research": {"members": ["alice"]}},
            "providers": {
                "openai": {"base_url": "https://api.openai.com/", "api_key_env": "OPENAI_KEY"},
                "ollama": {"base_url": "http://127.0.0.1:11434"},
            },
            "gateway": {
                "max_body_bytes": 1000,
                "upstream_timeout_seconds": 5,
                "drain_seconds": 0,
                "keys": {
                    "alice": {
                        "key": "sk-alice",
                        "principal": "alice",
                        "credential": "laptop",
                        "teams": ["research"],
                        "attributes": {"environment": "dev"},
                        "models": ["gpt-4o"],
                    },
                    DIGEST.upper(): {"principal": "bob"},
                },
            },
        }
    )


def test_every_error_is_reported_with_its_path():
    document = {
        "models": MODELS,
        "providers": {
            "azure": {"base_url": "https://x"},
            "openai": {"base_url": "ftp://x", "region": "eu"},
            "anthropic": {},
        },
        "gateway": {
            "max_body_bytes": 0,
            "tls": True,
            "keys": {
                "alice": {"principal": "alice"},
                "carol": {"key": "sk-carol", "principal": "", "teams": ["ops"]},
                DIGEST: {"principal": "bob", "models": ["gpt-9"], "attributes": {"a": 1}},
                "bob-again": {"key": "sk-bob", "principal": "bob"},
            },
        },
    }
    found = errors(document)
    assert (
        "providers.azure",
        "",
        "is not a provider; accepted: openai, anthropic, gemini, ollama, other",
    ) in found
    assert ("providers.openai.region", "", "unknown key; accepted: base_url, api_key_env") in found
    assert (
        "providers.openai.base_url",
        '"ftp://x"',
        "must be an http:// or https:// URL with a host",
    ) in found
    assert ("providers.anthropic.base_url", "", "is required") in found
    assert (
        "gateway.tls",
        "",
        "unknown key; accepted: keys, max_body_bytes, upstream_timeout_seconds, "
        "upstream_first_byte_seconds, drain_seconds, threads, admin_token_env, otel, "
        "max_connections, header_timeout_seconds, body_timeout_seconds, "
        "idle_timeout_seconds, max_event_bytes, max_answer_bytes",
    ) in found
    assert (
        "gateway.max_body_bytes",
        "0",
        "must be a whole number from 1 to 9007199254740992",
    ) in found
    paths = [path for path, _, _ in found]
    assert "gateway.keys.alice" in paths  # neither a digest nor `key`
    assert "gateway.keys.carol.principal" in paths
    assert "gateway.keys.carol.teams[0]" in paths
    assert f"gateway.keys.{DIGEST}.models[0]" in paths
    assert f"gateway.keys.{DIGEST}.attributes.a" in paths
    assert "gateway.keys.bob-again" in paths  # the same key as the digest above
    assert len(found) == 12, found
