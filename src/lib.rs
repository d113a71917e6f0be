//! usage_guard: meter and enforce usage limits on model calls.
//!
//! [`Guard::admit`] resolves a person's limits, reads their counters, refuses or picks the
//! source billed, and atomically reserves what the call may use; the returned [`Ticket`]
//! bills exactly what was used, once, or releases.
//!
//! The crate is built in layers, each importing only the ones before it (see
//! `docs/architecture.md`): the pure domain (`guard::domain`), the request side
//! (`ceiling`), the store and ledger adapters (`guard::store`, `guard::ledger`, behind the
//! `redis`, `sqlite` and `postgres` features), the engine (`guard::engine`) and the PyO3
//! layer (`py`, feature `python`). Everything a Rust user needs is re-exported here.

#![warn(unreachable_pub)]

pub(crate) mod ceiling;
mod error;
mod fork;
#[cfg(feature = "gateway")]
mod gateway;
mod guard;
mod lock;
mod runtime;

#[cfg(feature = "python")]
mod py;

pub use ceiling::{
    answer_text, count_request, count_request_for_group, count_tokens, fit, known_model,
    prompt_counts, reported_usage, requested_max_output, stopped_at_max, tokenizer_for,
    usage_capped, usage_paths, Api, Encoding, FitOptions, FitResult, KnownModel, PromptCount,
    ReportedUsage, ThinkingRange, Tokenizer,
};
pub use ceiling::{HttpRefusal, HttpShape};
pub use error::{Error, FieldError, Result};
#[cfg(feature = "gateway")]
pub use gateway::{Gateway, GatewayOptions};
pub use guard::domain::clock::{iso8601, parse_iso8601, Clock, ManualClock, Millis, SystemClock};
pub use guard::domain::decide::{RuleWarning, UsageCeiling};
pub use guard::domain::event::{Event, EventKind};
pub use guard::domain::generic::{Action, Attribute, GenericRule};
pub use guard::domain::health::{
    cooldown_timing, BreakerSettings, BreakerState, Cooldown, CooldownTiming, Cooled, HealthBook,
    HealthSettings, HealthSnapshot, Outcome, Recorded as HealthRecorded, TimingSource, Transition,
    Unavailable, UnavailableReason,
};
pub use guard::domain::path::{SourceKind, SourceRef};
pub use guard::domain::policy::{LongContext, Policy, PriceOrigin, Prices, Pricing, MAX_AMOUNT};
pub use guard::domain::refusal::{Reason, Refusal};
pub use guard::domain::rule::{CounterId, LimitType, Metric, Scope};
pub use guard::domain::view::{PersonView, UsageView};
pub use guard::domain::window::{Anchored, CalendarUnit, Window};
pub use guard::domain::words::UnknownWord;
pub use guard::engine::admit::admission::AdmitRequest;
pub use guard::engine::batch::batch_ticket::{BatchRequest, BatchTicket};
pub use guard::engine::guard::{flush_all_blocking, Guard};
pub use guard::engine::observe::event_stream::EventStream;
pub use guard::engine::observe::health::ProviderHealth;
pub use guard::engine::observe::metrics::{MetricFamily, MetricKind, MetricSample};
pub use guard::engine::observe::stats::Stats;
pub use guard::engine::quota::{QuotaRecord, RuleCounter};
pub use guard::engine::settle::ticket::{BillInfo, Billed, Recorded, Ticket, Usage};
pub use guard::ledger::{
    AuditQuery, AuditRow, GroupBy, Ledger, LedgerError, LedgerRow, RowCondition, RowField,
    RowMaker, SumFilter, UsageGroup, UsageQuery,
};
#[cfg(feature = "postgres")]
pub use guard::ledger::{Postgres, PostgresLedger};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use guard::ledger::{QuotaDb, QuotaDbAt, SqlLedger, SqlValue};
#[cfg(feature = "sqlite")]
pub use guard::ledger::{Sqlite, SqliteLedger};
#[cfg(feature = "redis")]
pub use guard::store::RedisStore;
pub use guard::store::{
    expiry_minute, BackgroundSettling, CounterKey, CounterRead, CounterStore, EpochRead, Fence,
    FenceAnswer, Fencing, HoldRef, KnownAnswer, KnownOutcome, KnownReserve, MemoryStore, OutageLog,
    PartSettle, PartsSettle, QueueJoin, QueueSpot, ReserveFromKnown, ReserveItem, ReserveOutcome,
    Settle, SettleOutcome, StoreCheck, StoreError, StoreFuture, UsageAdd, WaitQueues,
};
