"""`usage-guard check POLICY_FILE`: validate a policy file and print every error, warning and
note, the names each model answers to, and each rule in words."""

from __future__ import annotations

from .. import Policy, PolicyError


def format_error(error: dict[str, str]) -> str:
    """`path: message (got value)`, on one line."""
    message = "; ".join(part.strip() for part in error.get("message", "").splitlines())
    path, value = error.get("path", ""), error.get("value", "")
    text = f"{path}: {message}" if path else message
    return f"{text} (got {value})" if value else text


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


_PRICED_BY = {
    "policy": "priced by the policy",
    "file": "priced by settings.prices_file",
    "table": "priced by the built-in table",
}


def model_names_line(policy: Policy) -> str:
    """The names each model answers to and where its price comes from, and what happens to
    a model the policy does not declare: one line."""
    parts = []
    for m in policy.model_names:
        about = [f"also {', '.join(m['aliases'])}"] if m["aliases"] else []
        about.append(_PRICED_BY.get(m["prices"] or "", "no price"))
        parts.append(f"{m['id']} ({'; '.join(about)})")
    others = (
        "refused"
        if policy.unknown_models == "refuse"
        else 'allowed (settings.unknown_models = "allow"), with no per-model limit'
    )
    names = ", ".join(parts) or "none"
    return (
        f"models: {names}; each also by a snapshot name (-2024-08-06, -20241022, -latest), "
        f"with :latest, in any letter case; other models: {others}"
    )


def check(path: str, strict: bool = False) -> int:
    """Validates a policy file and prints a summary, every warning and every error. Exits 1
    on errors, and on warnings too when `strict`; else 0."""
    try:
        policy = Policy.load(path)
    except PolicyError as e:
        errors = e.errors or [{"path": "", "value": "", "message": str(e)}]
        print(f"{path}: {_count(len(errors), 'error')}")
        for error in errors:
            print(format_error(error))
        return 1
    models, teams, warnings = policy.models, policy.teams, policy.warnings
    summary = (
        f"{path}: valid ({_count(len(models), 'model')}: {', '.join(models) or '-'}; "
        f"{_count(len(teams), 'team')}: {', '.join(teams) or '-'})"
    )
    if warnings:
        failing = " (--strict: failing)" if strict else ""
        summary += f", {_count(len(warnings), 'warning')}{failing}"
    print(summary)
    print(model_names_line(policy))
    print(f"restart: {policy.restart_cost}")
    for note in policy.notes:
        print(f"note: {format_error(note)}")
    for warning in warnings:
        print(f"warning: {format_error(warning)}")
    for rule in policy.rules:
        print(f"rule {rule['name']!r}: {rule['sentence']}")
        if rule["overlaps"]:
            print(f"  overlaps: {', '.join(repr(name) for name in rule['overlaps'])}")
    return 1 if strict and warnings else 0
