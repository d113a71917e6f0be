"""What `import usage_guard` costs: the quota service's module (and asyncio with it) loads on
first use, not with the package; every name in `__all__` is still there."""

from __future__ import annotations

import subprocess
import sys

import usage_guard as ug


def _fresh(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_importing_the_package_does_not_load_the_quota_service_or_asyncio() -> None:
    code = (
        "import sys, usage_guard as ug\n"
        "g = ug.Guard(ug.Policy.from_dict({'models': {'m': {'display_name': 'M', "
        "'max_output_tokens': 10}}}))\n"
        "g.admit('a', 'm', prompt_tokens=1, max_tokens=1).bill(1, 1)\n"
        "print(sorted(m for m in ('asyncio', 'usage_guard.quota') if m in sys.modules))\n"
        "print({'Decision', 'PolicyInUse', 'QuotaService'} <= set(dir(ug)))\n"
        "print(ug.QuotaService.__module__, 'usage_guard.quota' in sys.modules)\n"
    )
    assert _fresh(code).splitlines() == ["[]", "True", "usage_guard.quota True"]


def test_every_public_name_resolves_and_a_wrong_one_is_an_attribute_error() -> None:
    from usage_guard import Decision, PolicyInUse, QuotaService

    assert (ug.Decision, ug.PolicyInUse, ug.QuotaService) == (Decision, PolicyInUse, QuotaService)
    assert all(getattr(ug, name) is not None for name in ug.__all__)
    try:
        ug.NotAName  # noqa: B018
    except AttributeError as error:
        assert "NotAName" in str(error)
    else:
        raise AssertionError("a name the package does not have resolved")


def test_the_cli_starts_without_the_quota_service() -> None:
    code = (
        "import sys\n"
        "from usage_guard.cli import main\n"
        "print('usage_guard.quota' in sys.modules, 'asyncio' in sys.modules)\n"
    )
    assert _fresh(code) == "False False"
