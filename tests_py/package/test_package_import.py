"""What `import usage_guard` costs: the quota service's module (and asyncio with it) loads on
first use, not with the package, and Python's `logging` with the first record the Rust core
logs; every name in `__all__` is still there."""

from __future__ import annotations

import subprocess
import sys

import usage_guard as ug
from redis_harness import BUDGET_POLICY


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
        "later = ('asyncio', 'logging', 'usage_guard.quota')\n"
        "print(sorted(m for m in later if m in sys.modules))\n"
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


def test_the_first_rust_record_loads_logging_and_reaches_its_handlers() -> None:
    # A store that cannot be reached logs a warning from the Rust core: the logger (and
    # `logging`) is made then, and the record reaches a handler set up after the import.
    code = (
        "import sys, socket, usage_guard as ug\n"
        "print('logging' in sys.modules)\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()\n"
        f"g = ug.Guard(ug.Policy.from_dict({BUDGET_POLICY!r}), "
        "store=ug.RedisStore(f'redis://127.0.0.1:{port}/0'))\n"
        "print('logging' in sys.modules)\n"
        "import logging\n"
        "seen = []\n"
        "class Keep(logging.Handler):\n"
        "    def emit(self, record): seen.append(record.getMessage())\n"
        "logging.getLogger('usage_guard').addHandler(Keep())\n"
        "try:\n"
        "    g.admit('alice', 'gpt-5', prompt_tokens=1, max_tokens=1)\n"
        "except ug.UsageLimitsUnavailable:\n"
        "    pass\n"
        "print(any('outage started' in message for message in seen))\n"
    )
    assert _fresh(code).splitlines() == ["False", "False", "True"]


def test_the_cli_starts_without_the_quota_service_or_the_demo() -> None:
    loaded = (
        "('usage_guard.quota', 'usage_guard.quota.model', 'usage_guard.cli.demo', 'logging', "
        "'asyncio')"
    )
    code = (
        "import sys\n"
        "import usage_guard.cli as cli\n"
        f"print([m for m in {loaded} if m in sys.modules])\n"
        "print(cli.EXAMPLE_POLICY.startswith('#'), callable(cli.run_day))\n"
        "print('usage_guard.cli.demo' in sys.modules)\n"
    )
    assert _fresh(code).splitlines() == ["[]", "True True", "True"]
