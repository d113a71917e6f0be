"""A model the policy does not list, when the policy refuses unknown models, is a refusal a
gateway can send as it is: 404 in each provider's shape, naming only the model asked for."""

from __future__ import annotations

import pickle

import pytest
import usage_guard as ug

POLICY = {
    "settings": {"unknown_models": "refuse"},
    "models": {
        "gpt-5": {"display_name": "GPT-5", "max_output_tokens": 100},
        "secret-internal-model": {"display_name": "Internal", "max_output_tokens": 100},
    },
}


@pytest.fixture
def refused() -> ug.ModelNotFound:
    guard = ug.Guard(ug.Policy.from_dict(POLICY))
    with pytest.raises(ug.ModelNotFound) as error:
        guard.admit("alice", "gpt-9", prompt_tokens=1, max_tokens=1)
    return error.value


def test_an_unknown_model_is_a_refusal_not_a_value_error(refused: ug.ModelNotFound) -> None:
    assert isinstance(refused, ug.UsageLimitError)
    assert not isinstance(refused, ValueError)
    assert refused.reason == "MODEL_NOT_FOUND"
    assert '"gpt-9"' in str(refused)
    assert "secret-internal-model" not in str(refused) and "gpt-5" not in str(refused)


def test_it_answers_404_in_each_providers_shape(refused: ug.ModelNotFound) -> None:
    status, headers, body = refused.to_http("openai")
    assert status == 404
    assert body["error"]["code"] == "model_not_found"
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["param"] == "model"
    assert "retry-after" not in headers
    status, _, body = refused.to_http("anthropic")
    assert (status, body["type"], body["error"]["type"]) == (404, "error", "not_found_error")
    status, _, body = refused.to_http("ollama")
    assert status == 404 and "gpt-9" in body["error"]
    for shape in ("openai", "anthropic", "ollama"):
        assert "secret-internal-model" not in str(refused.to_http(shape))


def test_it_pickles(refused: ug.ModelNotFound) -> None:
    back = pickle.loads(pickle.dumps(refused))
    assert type(back) is ug.ModelNotFound
    assert back.to_http("openai") == refused.to_http("openai")


def test_the_same_policy_admits_a_model_it_lists() -> None:
    guard = ug.Guard(ug.Policy.from_dict(POLICY))
    guard.admit("alice", "gpt-5", prompt_tokens=1, max_tokens=1).release()
