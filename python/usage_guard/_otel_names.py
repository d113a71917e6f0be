"""What `usage_guard.otel` calls things: the GenAI semantic conventions' provider and
operation names of each provider word, and the core's metric families as OTel instruments."""

from __future__ import annotations

from typing import Any, Callable

# provider word (the `provider=` of admit) -> (gen_ai.provider.name, gen_ai.operation.name)
PROVIDERS: dict[str, tuple[str, str]] = {
    "openai": ("openai", "chat"),
    "openai.responses": ("openai", "chat"),
    "openai.completions": ("openai", "text_completion"),
    "openai.embeddings": ("openai", "embeddings"),
    "anthropic": ("anthropic", "chat"),
    "gemini": ("gcp.gemini", "generate_content"),
    "ollama": ("ollama", "chat"),
    "ollama.generate": ("ollama", "text_completion"),
    "ollama.embed": ("ollama", "embeddings"),
}


def instrument_name(family: str) -> str:
    """`usage_guard_open_holds` -> `usage_guard.open_holds`."""
    prefix = "usage_guard_"
    return "usage_guard." + (family[len(prefix) :] if family.startswith(prefix) else family)


def observer(guard: Any, family: str) -> Callable[[Any], list[Any]]:
    """A callback observing `family` of `guard.metrics()`: one observation per sample, with
    the sample's labels as attributes."""
    from opentelemetry.metrics import Observation

    def observe(options: Any) -> list[Any]:
        data = guard.metrics().get(family)
        samples = data["samples"] if data else []
        return [Observation(value, dict(labels)) for _, labels, value in samples]

    return observe


def register_core(meter: Any, guard: Any) -> list[str]:
    """An observable instrument per counter and gauge family of `guard.metrics()` (counters
    as observable counters, gauges as observable gauges; the admission histogram is recorded
    per call instead); answers the instrument names."""
    names = []
    for family, data in guard.metrics().items():
        name = instrument_name(family)
        if data["type"] == "counter":
            meter.create_observable_counter(
                name, [observer(guard, family)], description=data["help"]
            )
        elif data["type"] == "gauge":
            meter.create_observable_gauge(name, [observer(guard, family)], description=data["help"])
        else:
            continue
        names.append(name)
    return names
