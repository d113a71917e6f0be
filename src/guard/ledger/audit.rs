//! The audit log: one `audit_log` row per event a guard sends (soft thresholds, `warn` rules
//! past their budget, shadowed refusals, actions taken), written through the ledger's
//! writer thread like usage rows, idempotent by event id. Its table comes with its own
//! migration (`usage_guard_migrations` records which ran), beside the usage table.

// Without a database backend only the row and query types are used.
#![cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]

use crate::guard::domain::clock::Millis;
use crate::guard::domain::event::Event;

/// One event as the audit log keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRow {
    /// The event's id (unique across the fleet): the primary key.
    pub event_id: String,
    /// When the event went out (ms since the epoch, guard clock).
    pub at_ms: Millis,
    /// `soft_threshold`, `over_budget`, `shadow_refusal`, `degrade`, `throttle`,
    /// `halt_session` (other producers may add kinds).
    pub kind: String,
    /// The rule (or quota) the event is about.
    pub rule: String,
    /// The counter key (`CounterKey::render`): which counter and window bucket.
    pub counter_key: String,
    /// The threshold crossed (1.0 past the budget, and for actions).
    pub threshold: f64,
    /// The call's user, when it had one.
    pub principal: Option<String>,
    pub model: Option<String>,
    /// The rest, as JSON: amount (the metric), unit, used, budget (integers in the unit:
    /// micro-dollars for cost), action, would_refuse.
    pub detail: serde_json::Value,
}

impl AuditRow {
    /// The row of `event`.
    pub fn of(event: &Event) -> AuditRow {
        AuditRow {
            event_id: event.id.clone(),
            at_ms: event.at_ms,
            kind: event.kind.as_str().to_string(),
            rule: event.rule.to_string(),
            counter_key: event.key.render(),
            threshold: event.threshold,
            principal: event.principal.as_deref().map(str::to_string),
            model: event.model.as_deref().map(str::to_string),
            detail: event.detail(),
        }
    }
}

/// The kind of the row a guard writes with each counter-store epoch it writes
/// (`AuditRow::store_epoch`).
pub(crate) const STORE_EPOCH: &str = "store_epoch";

impl AuditRow {
    /// The row of an epoch `generation` a guard wrote at `at_ms`: `how` is `first_start`,
    /// `recovered` (after a loss, refilled from the ledger) or `operator` (`recover()`). A
    /// guard that recovers a store with no epoch reads these rows to tell a total loss from
    /// a first start.
    pub fn store_epoch(generation: &str, at_ms: Millis, how: &str) -> AuditRow {
        AuditRow {
            event_id: format!("{STORE_EPOCH}:{generation}"),
            at_ms,
            kind: STORE_EPOCH.to_string(),
            rule: "counter store".to_string(),
            counter_key: String::new(),
            threshold: 0.0,
            principal: None,
            model: None,
            detail: serde_json::json!({ "generation": generation, "how": how }),
        }
    }
}

/// Which audit rows to list: `[since, until)`, one kind, one rule (`None` matches every
/// row); with `limit`, only the latest that many. Rows come oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    pub since: Option<Millis>,
    pub until: Option<Millis>,
    pub kind: Option<String>,
    pub rule: Option<String>,
    pub limit: Option<u64>,
}

/// The most audit rows kept in memory while the database does not take them (events are
/// rare: once per window per counter); past it the oldest are dropped, with a log line.
pub(crate) const MAX_PENDING: usize = 10_000;

/// A migration: its name (recorded once applied) and its statements.
pub(crate) struct Migration {
    pub(crate) name: &'static str,
    pub(crate) sql: &'static str,
}

/// Which migrations ran (shared by every module with its own tables).
pub(crate) const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS usage_guard_migrations (
    name TEXT PRIMARY KEY,
    applied_at_ms BIGINT NOT NULL
)";

/// The ledger's migrations (the audit log's table, the usage table's changes), in order.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        name: "audit_log/1",
        sql: "
CREATE TABLE IF NOT EXISTS audit_log (
    event_id TEXT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    kind TEXT NOT NULL,
    rule TEXT NOT NULL,
    counter_key TEXT NOT NULL,
    threshold DOUBLE PRECISION NOT NULL,
    principal TEXT,
    model TEXT,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_log_at ON audit_log (at_ms);
",
    },
    // Each usage row's call attributes (`recorded::row_json`), which generic rules' counters
    // are refilled by; older rows keep NULL (they match no attribute condition). The index
    // serves those sums, which name no user, team or model.
    Migration {
        name: "usage_ledger/attributes",
        sql: "
ALTER TABLE usage_ledger ADD COLUMN attributes TEXT;
CREATE INDEX IF NOT EXISTS usage_ledger_at ON usage_ledger (at_ms);
",
    },
];

/// The rows a select returned, oldest first (a limited select reads newest first).
pub(crate) fn in_order(mut rows: Vec<AuditRow>, query: &AuditQuery) -> Vec<AuditRow> {
    if query.limit.is_some() {
        rows.reverse();
    }
    rows
}

/// A `detail` column read back (text that is not JSON is kept as a string).
pub(crate) fn detail_of(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::from(text))
}

/// Now, for `applied_at_ms`.
pub(crate) fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
