"""A Gemini call's arguments as the guard reads them: a dict config in the SDK's snake_case
field names (the SDK's pydantic types also accept their camelCase aliases, which admission
would not read: `maxOutputTokens` would be neither counted nor fitted), the model's resource
name as its id, and an `extra_body` setting what the guard counts or fits refused."""

from __future__ import annotations

import typing
from typing import Any, Optional

from google.genai import types
from pydantic import BaseModel

from .call import g

__all__ = ["prepare", "refuse_metered_extra_body", "snake_keys"]


def _model_of(annotation: Any) -> Optional[type[BaseModel]]:
    """The SDK type a field holds (`Optional[ThinkingConfig]`: `ThinkingConfig`), if any."""
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def snake_keys(value: dict[str, Any], model: type[BaseModel], where: str) -> dict[str, Any]:
    """`value`, a dict for the SDK type `model`, with each camelCase alias renamed to its
    field's name, in the nested configs too (`thinkingConfig.thinkingBudget`,
    `httpOptions.extraBody`). A field given in both spellings is refused (ValueError): the
    SDK refuses it too, and only one of them could be what the guard reads."""
    fields = model.model_fields
    names = {f.alias: name for name, f in fields.items() if f.alias and f.alias != name}
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = names.get(key, key)
        if name in out:
            raise ValueError(
                f"{where}.{key}: {name!r} is given twice, as {name!r} and as its alias "
                f"{fields[name].alias!r}; give one of them"
            )
        sub = _model_of(fields[name].annotation) if name in fields else None
        if sub is not None and isinstance(item, dict):
            item = snake_keys(item, sub, f"{where}.{name}")
        out[name] = item
    return out


# What metering reads in the REST body, by its camelCase name (the SDK also accepts the
# snake_case one in `extra_body`): the prompt's fields, and in the generation config the
# output maximum, the answer count and the thinking budget.
_METERED_BODY = ("contents", "systemInstruction", "tools")
_METERED_GENERATION = ("maxOutputTokens", "candidateCount", "thinkingConfig")


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def _metered_keys(extra: Any, where: str) -> list[str]:
    """The keys of an `extra_body` (Gemini's REST shape) that metering reads, as paths."""
    if not isinstance(extra, dict):
        return []
    top = _METERED_BODY + tuple(map(_snake, _METERED_BODY))
    found = [f"{where}.{k}" for k in top if k in extra]
    for name in ("generationConfig", "generation_config"):
        generation = extra.get(name)
        if isinstance(generation, dict):
            keys = _METERED_GENERATION + tuple(map(_snake, _METERED_GENERATION))
            found += [f"{where}.{name}.{k}" for k in keys if k in generation]
    return found


def refuse_metered_extra_body(http_options: Any, where: str) -> None:
    """Refuses an `extra_body` (the SDK merges it over the request body it built from the
    config, recursively) that carries a field metering reads: the guard would count and fit
    the config's value while the provider received another. Raises ValueError naming it.
    `http_options` is an `HttpOptions` or a dict in snake_case (`snake_keys`); a dict still
    spelling `extraBody` is read too."""
    if isinstance(http_options, dict):
        http_options = snake_keys(http_options, types.HttpOptions, where)
    extra = g(http_options, "extra_body")
    found = _metered_keys(extra, f"{where}.extra_body")
    if found:
        raise ValueError(
            f"{found[0]}: {where}.extra_body may not set what the guard counts or fits "
            "(contents, system instruction, tools, max_output_tokens, candidate_count, "
            "thinking_config); pass it as the argument or config field of the same name, "
            "where it is counted and fitted"
        )


def _model_name(model: Any) -> Any:
    """`models/<id>`, the resource name, is the model `<id>` (the SDK sends both to the same
    endpoint): admission reads the id the policy declares."""
    if isinstance(model, str) and model.startswith("models/"):
        return model[len("models/") :]
    return model


def prepare(kwargs: dict[str, Any], config_type: type[BaseModel]) -> dict[str, Any]:
    """The call's keyword arguments as the guard reads and the SDK sends them: a config always
    (admission writes the fitted output maximum into it), a dict config in snake_case, the
    model's resource name as its id; an `extra_body` setting a metered field is refused."""
    kwargs = dict(kwargs)
    config = kwargs.get("config")
    if config is None:
        config = {}
    elif isinstance(config, dict):
        config = snake_keys(config, config_type, "config")
    kwargs["config"] = config
    if "model" in kwargs:
        kwargs["model"] = _model_name(kwargs["model"])
    refuse_metered_extra_body(g(config, "http_options"), "config.http_options")
    return kwargs
