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
//! layer (`py`, feature `python`).
//!
//! The crate root is the public Rust API: the guard and its tickets ([`Guard`], [`Ticket`],
//! [`AdmitRequest`], [`Usage`], [`Billed`]), the policy and its words ([`Policy`],
//! [`Metric`], [`Window`], ...), the counter stores ([`MemoryStore`], `RedisStore`, the
//! [`CounterStore`] trait they share), the ledgers ([`Ledger`], `SqliteLedger`,
//! `PostgresLedger`), errors and refusals ([`Error`], [`Refusal`]), the clock ([`Clock`],
//! [`ManualClock`]), the request side a caller uses on its own ([`count_tokens`],
//! [`count_request`], [`fit`], [`usage_capped`], [`reported_usage`]) and the HTTP gateway
//! (`Gateway`, feature `gateway`). Everything else is `pub(crate)`, except the pieces in
//! [`internals`] (a store's wire types and what the integration tests drive directly),
//! which are not a stable API.

#![warn(unreachable_pub)]

#[cfg(feature = "thread-mimalloc")]
mod alloc;
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

/// Feature `mimalloc` (a build choice): every allocation of the Rust code goes to mimalloc,
/// never Python's objects (docs/performance.md, "The allocator").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Feature `thread-mimalloc` (in the wheel): mimalloc on the gateway's serving threads only
/// (`alloc.rs`); `mimalloc`, when also on, takes every thread.
#[cfg(all(feature = "thread-mimalloc", not(feature = "mimalloc")))]
#[global_allocator]
static ALLOCATOR: alloc::ThreadMimalloc = alloc::ThreadMimalloc;

/// Asks for mimalloc on this thread where the build has `thread-mimalloc` (a no-op otherwise).
#[cfg(feature = "gateway")]
pub(crate) fn prefer_mimalloc() {
    #[cfg(feature = "thread-mimalloc")]
    alloc::prefer_mimalloc();
}

pub use ceiling::{
    answer_text, count_request, count_tokens, fit, known_model, reported_usage,
    requested_max_output, stopped_at_max, tokenizer_for, usage_capped, Api, Encoding, FitOptions,
    FitResult, HttpRefusal, HttpShape, KnownModel, PromptCount, ReportedUsage, ThinkingRange,
    Tokenizer,
};
pub use error::{Error, FieldError, Result};
#[cfg(feature = "gateway")]
pub use gateway::{Gateway, GatewayOptions};
pub use guard::domain::clock::{iso8601, parse_iso8601, Clock, ManualClock, Millis, SystemClock};
pub use guard::domain::decide::{RuleWarning, UsageCeiling};
pub use guard::domain::event::{Event, EventKind};
pub use guard::domain::generic::{Action, Attribute, GenericRule};
pub use guard::domain::health::{
    BreakerSettings, BreakerState, Cooldown, CooldownTiming, Cooled, HealthSettings,
    HealthSnapshot, Outcome, Recorded as HealthRecorded, TimingSource, Transition, Unavailable,
    UnavailableReason,
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
pub use guard::engine::settle::ticket::{BillInfo, Billed, Recorded, Ticket, Usage};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use guard::ledger::SqlLedger;
pub use guard::ledger::{
    AuditQuery, AuditRow, GroupBy, Ledger, LedgerError, LedgerRow, RowCondition, RowField,
    RowMaker, SumFilter, UsageGroup, UsageQuery,
};
#[cfg(feature = "postgres")]
pub use guard::ledger::{Postgres, PostgresLedger};
#[cfg(feature = "sqlite")]
pub use guard::ledger::{Sqlite, SqliteLedger};
pub use guard::store::{
    CounterStore, LeaseOptions, LeasedStore, MemoryStore, StoreCheck, StoreError,
};
#[cfg(feature = "redis")]
pub use guard::store::{Migrated, RedisStore};

/// Not a stable API: the parts of the crate that are public only so that its own integration
/// tests (`tests/it/`, the shared store suite in `tests/it/common/`) and benches can drive
/// them directly, and so that a store written outside the crate can implement
/// [`CounterStore`] (whose methods take and answer the wire types here). They may change in
/// any release; a user of the library needs nothing from this module to admit and bill.
#[doc(hidden)]
pub mod internals {
    pub use crate::ceiling::{count_request_for_group, prompt_counts, usage_paths};
    pub use crate::guard::engine::quota::{QuotaRecord, RuleCounter};
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub use crate::guard::ledger::{QuotaDb, QuotaDbAt, SqlValue};
    pub use crate::guard::store::{
        expiry_minute, BackgroundSettling, CounterKey, CounterRead, EpochRead, Fence, FenceAnswer,
        Fencing, HoldRef, KnownAnswer, KnownOutcome, KnownReserve, OutageLog, PartSettle,
        PartsSettle, QueueJoin, QueueSpot, ReserveFromKnown, ReserveItem, ReserveOutcome, Settle,
        SettleOutcome, StoreFuture, UsageAdd, WaitQueues,
    };
}
