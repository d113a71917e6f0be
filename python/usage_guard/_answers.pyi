"""The guard's attributes on guarded answers and streams, for the provider stubs: the
attributes of `usage_guard.types.GuardedAnswer` / `GuardedStreamAnswer`, declared on a
plain class (a stub class that names the Protocols as bases would leave them abstract)."""

from typing import Optional

from .types import Billed, Restriction, RuleWarning, UsageLimits

class Answer:
    usage_limits: UsageLimits
    usage_restriction: Optional[Restriction]
    usage_billed: Optional[Billed]
    usage_warnings: list[RuleWarning]
    usage_degraded: Optional[str]
    usage_resolution: Optional[str]

class StreamAnswer:
    usage_limits: Optional[UsageLimits]
    usage_restriction: Optional[Restriction]
    usage_billed: Optional[Billed]
    usage_warnings: list[RuleWarning]
    usage_degraded: Optional[str]
    usage_resolution: Optional[str]
