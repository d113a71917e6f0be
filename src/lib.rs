//! usage_guard: meter and enforce usage limits on model calls.
//!
//! `Guard::admit` resolves a person's limits, reads their counters, refuses or picks the
//! source billed, and atomically reserves what the call may use; the returned `Ticket` bills
//! exactly what was used, once, or releases.

pub mod ceiling;
pub mod error;
pub mod guard;
pub mod runtime;

#[cfg(feature = "python")]
mod py;

pub use error::{Error, FieldError, Result};
pub use guard::batch::{BatchRequest, BatchTicket};
pub use guard::clock::{Clock, ManualClock, Millis, SystemClock};
pub use guard::decide::UsageCeiling;
pub use guard::guard::{AdmitRequest, Guard, Stats};
pub use guard::ledger::{
    GroupBy, Ledger, LedgerError, LedgerRow, PostgresLedger, SqliteLedger, SumFilter, UsageGroup,
    UsageQuery,
};
pub use guard::path::{SourceKind, SourceRef};
pub use guard::policy::{Policy, Prices};
pub use guard::refusal::{HttpRefusal, HttpShape, Reason, Refusal};
pub use guard::rule::{LimitType, Metric};
pub use guard::store::{CounterStore, MemoryStore, RedisStore};
pub use guard::ticket::{BillInfo, Billed, Ticket, Usage};
pub use guard::view::UsageView;
pub use guard::window::Window;
