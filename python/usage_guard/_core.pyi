"""Type stubs for the compiled core (`usage_guard._core`), checked by mypy.stubtest."""

import datetime
import os
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Any, Optional, Union, final

from .types import (
    Billed,
    Ceiling,
    ErrorShape,
    LimitType,
    Metric,
    PromptCount,
    Provider,
    Reserved,
    Source,
    UsageView,
)

__version__: str

_Instant = Union[str, datetime.datetime]

@final
class Refusal:
    @property
    def reason(self) -> str: ...
    @property
    def limit_type(self) -> Optional[LimitType]: ...
    @property
    def metric(self) -> Optional[Metric]: ...
    @property
    def amount(self) -> Optional[int]: ...
    @property
    def window(self) -> Optional[str]: ...
    @property
    def is_rate_limit(self) -> bool: ...
    @property
    def resets_at(self) -> Optional[str]: ...
    @property
    def retry_after(self) -> Optional[int]: ...
    @property
    def unavailable(self) -> bool: ...
    @property
    def message(self) -> str: ...
    def to_http(self, provider: ErrorShape = "openai") -> tuple[int, dict[str, str], Any]: ...

@final
class ManualClock:
    def __new__(cls, start: Optional[_Instant] = None) -> ManualClock: ...
    def now(self) -> str: ...
    def now_ms(self) -> int: ...
    def set(self, when: _Instant) -> None: ...
    def advance(
        self, seconds: float = 0.0, *, minutes: float = 0.0, hours: float = 0.0, days: float = 0.0
    ) -> None: ...

@final
class Policy:
    @staticmethod
    def from_dict(document: Mapping[str, Any]) -> Policy: ...
    @staticmethod
    def from_json(text: str) -> Policy: ...
    @staticmethod
    def from_toml(text: str) -> Policy: ...
    @staticmethod
    def load(path: Union[str, os.PathLike[str]]) -> Policy: ...
    @property
    def models(self) -> list[str]: ...
    @property
    def teams(self) -> list[str]: ...
    def display_name(self, model: str) -> str: ...

@final
class MemoryStore:
    def __new__(cls) -> MemoryStore: ...
    def __len__(self) -> int: ...

@final
class RedisStore:
    def __new__(cls, url: str, prefix: str = "ug") -> RedisStore: ...
    @classmethod
    def cluster(cls, urls: Sequence[str], prefix: str = "ug") -> RedisStore: ...
    @property
    def prefix(self) -> str: ...

@final
class Ticket:
    @property
    def id(self) -> str: ...
    @property
    def source(self) -> Source: ...
    @property
    def ceiling(self) -> Ceiling: ...
    @property
    def reserved(self) -> Reserved: ...
    @property
    def settled(self) -> bool: ...
    @property
    def uncounted(self) -> bool: ...
    def bill(
        self,
        input_tokens: int,
        output_tokens: int,
        cached_input_tokens: Optional[int] = None,
        cost_micros: Optional[int] = None,
        compute_ms: Optional[int] = None,
        *,
        reasoning_tokens: Optional[int] = None,
        request_id: Optional[str] = None,
        metadata: Optional[Any] = None,
    ) -> Optional[Billed]: ...
    def bill_async(
        self,
        input_tokens: int,
        output_tokens: int,
        cached_input_tokens: Optional[int] = None,
        cost_micros: Optional[int] = None,
        compute_ms: Optional[int] = None,
        *,
        reasoning_tokens: Optional[int] = None,
        request_id: Optional[str] = None,
        metadata: Optional[Any] = None,
    ) -> Awaitable[Optional[Billed]]: ...
    def release(self) -> bool: ...
    def release_async(self) -> Awaitable[bool]: ...

@final
class Guard:
    def __new__(
        cls,
        policy: Policy,
        store: Optional[Union[MemoryStore, RedisStore]] = None,
        clock: Optional[ManualClock] = None,
        ledger: Optional[Union[SqliteLedger, PostgresLedger]] = None,
    ) -> Guard: ...
    @property
    def ledger(self) -> Optional[Union[SqliteLedger, PostgresLedger]]: ...
    def close(self) -> None: ...
    def admit_batch(
        self, user: str, model: str, requests: Iterable[Mapping[str, Any]]
    ) -> BatchTicket: ...
    def resume_batch(self, state: str) -> BatchTicket: ...
    def admit(
        self,
        user: Optional[str],
        model: str,
        request: Optional[Any] = None,
        *,
        prompt_tokens: Optional[int] = None,
        max_tokens: Optional[int] = None,
        provider: Optional[Provider] = None,
    ) -> Ticket: ...
    def admit_async(
        self,
        user: Optional[str],
        model: str,
        request: Optional[Any] = None,
        *,
        prompt_tokens: Optional[int] = None,
        max_tokens: Optional[int] = None,
        provider: Optional[Provider] = None,
    ) -> Awaitable[Ticket]: ...
    def usage(self, user: Optional[str], model: str) -> UsageView: ...
    def usage_async(self, user: Optional[str], model: str) -> Awaitable[UsageView]: ...
    def set_policy(self, policy: Policy) -> None: ...
    @property
    def policy_version(self) -> int: ...
    def stats(self) -> dict[str, int]: ...

# The usage ceiling (src/py/ceiling.rs).

@final
class FitResult:
    @property
    def request(self) -> dict[str, Any]: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def prompt_exact(self) -> bool: ...
    @property
    def max_output_tokens(self) -> Optional[int]: ...
    @property
    def thinking_budget(self) -> Optional[int]: ...
    @property
    def thinking_disabled(self) -> bool: ...
    @property
    def output_capped(self) -> bool: ...
    @property
    def lowered(self) -> bool: ...
    @property
    def provider(self) -> Provider: ...

def count_tokens(text: str, encoding: str = "o200k_base") -> int: ...
def count_prompt(
    request: Any,
    provider: Provider = "openai",
    model: Optional[Union[str, list[str]]] = None,
    *,
    policy: Optional[Policy] = None,
) -> PromptCount: ...
def fit(
    request: Any,
    ceiling: Ceiling,
    provider: Provider = "openai",
    model: Optional[str] = None,
    *,
    policy: Optional[Policy] = None,
    require_full_output: bool = False,
) -> FitResult: ...
def usage_capped(
    response: Any, fit_result: FitResult, provider: Optional[Provider] = None
) -> bool: ...
def intersect_ceilings(a: Ceiling, b: Ceiling) -> Ceiling: ...

class LedgerError(RuntimeError): ...

@final
class SqliteLedger:
    def __new__(cls, path: str = ":memory:") -> SqliteLedger: ...
    def query(
        self,
        user: Optional[str] = None,
        team: Optional[str] = None,
        model: Optional[str] = None,
        since: Optional[_Instant] = None,
        until: Optional[_Instant] = None,
        group_by: Optional[list[str]] = None,
    ) -> list[dict[str, Any]]: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...
    @property
    def pending(self) -> tuple[int, int]: ...

@final
class PostgresLedger:
    def __new__(cls, url: str) -> PostgresLedger: ...
    def query(
        self,
        user: Optional[str] = None,
        team: Optional[str] = None,
        model: Optional[str] = None,
        since: Optional[_Instant] = None,
        until: Optional[_Instant] = None,
        group_by: Optional[list[str]] = None,
    ) -> list[dict[str, Any]]: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...
    @property
    def pending(self) -> tuple[int, int]: ...

@final
class BatchTicket:
    @property
    def id(self) -> str: ...
    @property
    def source(self) -> Source: ...
    @property
    def reserved(self) -> Reserved: ...
    @property
    def state(self) -> str: ...
    def bill_part(
        self,
        result_id: str,
        input_tokens: int,
        output_tokens: int,
        cached_input_tokens: Optional[int] = None,
        cost_micros: Optional[int] = None,
        compute_ms: Optional[int] = None,
        *,
        reasoning_tokens: Optional[int] = None,
        request_id: Optional[str] = None,
        metadata: Optional[Any] = None,
    ) -> Optional[Billed]: ...
    def finish(self) -> int: ...

def _flush_ledgers() -> list[str]: ...
