//! The SQL text both databases share: the table, the idempotent insert, the sums and the
//! grouped query, written once for a [`Dialect`] (placeholders, JSON and time functions,
//! column types). What differs in running it lives in each database's `SqlDialect`.

use super::{GroupBy, LedgerRow, RowCondition, RowField, SumFilter, UsageQuery};
use crate::guard::domain::rule::Metric;

/// Which database the SQL text is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The `n`th placeholder (from 1): `?n` or `$n`.
    pub(crate) fn placeholder(self, n: usize) -> String {
        match self {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}"),
        }
    }

    /// The column type of an auto-increment integer primary key.
    pub(crate) fn auto_id(self) -> &'static str {
        match self {
            Dialect::Sqlite => "INTEGER PRIMARY KEY AUTOINCREMENT",
            Dialect::Postgres => "BIGSERIAL PRIMARY KEY",
        }
    }

    /// The start of a transaction that writes: SQLite takes the write lock at once
    /// (`IMMEDIATE`), so another writer makes it wait instead of failing at commit.
    pub(crate) fn begin(self) -> &'static str {
        match self {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN",
        }
    }
}

/// A value bound to a statement or read from a row.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

/// A bound parameter of the usage table's insert (its variant keeps the column's type,
/// which PostgreSQL's typed column arrays need even for a NULL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Param {
    Text(String),
    OptText(Option<String>),
    Int(i64),
}

impl From<Param> for SqlValue {
    fn from(p: Param) -> SqlValue {
        match p {
            Param::Text(t) | Param::OptText(Some(t)) => SqlValue::Text(t),
            Param::OptText(None) => SqlValue::Null,
            Param::Int(i) => SqlValue::Int(i),
        }
    }
}

/// The table and its indexes (created on first use).
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS usage_ledger (
    ticket_id TEXT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    day TEXT NOT NULL,
    user_id TEXT,
    teams TEXT NOT NULL,
    source_type TEXT NOT NULL,
    source_id TEXT NOT NULL,
    team_id TEXT,
    model TEXT NOT NULL,
    input_tokens BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    reasoning_tokens BIGINT NOT NULL,
    cost_micros BIGINT NOT NULL,
    compute_ms BIGINT NOT NULL,
    request_id TEXT,
    metadata TEXT
);
CREATE INDEX IF NOT EXISTS usage_ledger_user_at ON usage_ledger (user_id, at_ms);
CREATE INDEX IF NOT EXISTS usage_ledger_model_at ON usage_ledger (model, at_ms);
CREATE INDEX IF NOT EXISTS usage_ledger_team_at ON usage_ledger (team_id, at_ms);
";

const COLUMNS: [&str; 18] = [
    "ticket_id",
    "at_ms",
    "day",
    "user_id",
    "teams",
    "source_type",
    "source_id",
    "team_id",
    "model",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_micros",
    "compute_ms",
    "request_id",
    "metadata",
    "attributes",
];

fn int(v: u64) -> Param {
    Param::Int(i64::try_from(v).unwrap_or(i64::MAX))
}

/// Rows in one multi-row insert. SQLite binds 18 parameters a row against its limit of
/// 32,766; PostgreSQL binds one array per column (no limit), chunked only to keep one
/// statement's parameters a few hundred KB.
pub(crate) fn chunk_rows(dialect: Dialect) -> usize {
    match dialect {
        Dialect::Sqlite => 1_000,
        Dialect::Postgres => 2_000,
    }
}

#[cfg(feature = "sqlite")]
/// The insert of `rows` rows in one statement: a row whose ticket id is already there is
/// skipped.
pub(crate) fn insert_sql(dialect: Dialect, rows: usize) -> String {
    let width = COLUMNS.len();
    let tuples: Vec<String> = (0..rows)
        .map(|r| {
            let values: Vec<String> = (1..=width)
                .map(|c| dialect.placeholder(r * width + c))
                .collect();
            format!("({})", values.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO usage_ledger ({}) VALUES {} ON CONFLICT (ticket_id) DO NOTHING",
        COLUMNS.join(", "),
        tuples.join(", ")
    )
}

#[cfg(feature = "postgres")]
/// PostgreSQL's insert of any number of rows with one parameter per column (an array each,
/// cast to the column's type): one prepared statement, no parameter limit, no per-row parse.
pub(crate) fn unnest_insert_sql() -> String {
    let arrays: Vec<String> = insert_params(&LedgerRow::default())
        .iter()
        .enumerate()
        .map(|(i, p)| match p {
            Param::Int(_) => format!("${}::bigint[]", i + 1),
            _ => format!("${}::text[]", i + 1),
        })
        .collect();
    format!(
        "INSERT INTO usage_ledger ({}) SELECT * FROM unnest({}) ON CONFLICT (ticket_id) DO NOTHING",
        COLUMNS.join(", "),
        arrays.join(", ")
    )
}

#[cfg(feature = "postgres")]
/// A column of `unnest_insert_sql`'s parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ColumnParam {
    Text(Vec<Option<String>>),
    Int(Vec<i64>),
}

#[cfg(feature = "postgres")]
/// The parameters of `rows` for `unnest_insert_sql`, column after column.
pub(crate) fn column_params(rows: &[LedgerRow]) -> Vec<ColumnParam> {
    let mut columns: Vec<ColumnParam> = insert_params(&LedgerRow::default())
        .iter()
        .map(|p| match p {
            Param::Int(_) => ColumnParam::Int(Vec::with_capacity(rows.len())),
            _ => ColumnParam::Text(Vec::with_capacity(rows.len())),
        })
        .collect();
    for row in rows {
        for (column, p) in columns.iter_mut().zip(insert_params(row)) {
            match (column, p) {
                (ColumnParam::Int(v), Param::Int(i)) => v.push(i),
                (ColumnParam::Text(v), Param::Text(t)) => v.push(Some(t)),
                (ColumnParam::Text(v), Param::OptText(t)) => v.push(t),
                _ => unreachable!("a column keeps its type"),
            }
        }
    }
    columns
}

#[cfg(feature = "sqlite")]
/// The parameters of `rows` for `insert_sql(dialect, rows.len())`, row after row.
pub(crate) fn insert_all_params(rows: &[LedgerRow]) -> Vec<SqlValue> {
    rows.iter()
        .flat_map(insert_params)
        .map(SqlValue::from)
        .collect()
}

/// A row's parameters, in column order.
fn insert_params(row: &LedgerRow) -> Vec<Param> {
    vec![
        Param::Text(row.ticket_id.clone()),
        Param::Int(row.at_ms),
        Param::Text(super::day_of(row.at_ms)),
        Param::OptText(row.user.clone()),
        Param::Text(serde_json::to_string(&row.teams).unwrap_or_else(|_| "[]".into())),
        Param::Text(row.source_type.clone()),
        Param::Text(row.source_id.clone()),
        Param::OptText(row.team().map(str::to_string)),
        Param::Text(row.model.clone()),
        int(row.input_tokens),
        int(row.cached_input_tokens),
        int(row.output_tokens),
        int(row.reasoning_tokens),
        int(row.cost_micros),
        int(row.compute_ms),
        Param::OptText(row.request_id.clone()),
        Param::OptText(row.metadata.as_ref().map(|m| m.to_string())),
        Param::OptText(row.attributes.as_ref().map(|m| m.to_string())),
    ]
}

fn metric_expr(metric: Metric) -> &'static str {
    match metric {
        Metric::Tokens => "input_tokens + output_tokens",
        Metric::InputTokens => "input_tokens",
        Metric::OutputTokens => "output_tokens",
        Metric::Cost => "cost_micros",
        Metric::ComputeMs => "compute_ms",
        Metric::Requests | Metric::Concurrency => "1",
    }
}

struct Where {
    dialect: Dialect,
    clauses: Vec<String>,
    params: Vec<SqlValue>,
}

impl Where {
    fn new(dialect: Dialect) -> Self {
        Where {
            dialect,
            clauses: Vec::new(),
            params: Vec::new(),
        }
    }

    fn add(&mut self, column_op: &str, param: SqlValue) {
        self.params.push(param);
        let ph = self.dialect.placeholder(self.params.len());
        self.clauses.push(format!("{column_op} {ph}"));
    }

    fn text(&mut self, column: &str, value: &Option<String>) {
        if let Some(v) = value {
            self.add(&format!("{column} ="), SqlValue::Text(v.clone()));
        }
    }

    /// `field` is one of `values` (negated: is not; a field the row lacks is neither).
    fn condition(&mut self, c: &RowCondition) {
        let mut phs = Vec::with_capacity(c.values.len());
        for v in &c.values {
            self.params.push(SqlValue::Text(v.clone()));
            phs.push(self.dialect.placeholder(self.params.len()));
        }
        let list = phs.join(", ");
        // The keys are attribute words (never input): safe to write into the SQL.
        let test = match (c.field, self.dialect) {
            (RowField::User, _) => format!("user_id IN ({list})"),
            (RowField::Model, _) => format!("model IN ({list})"),
            (RowField::Key(k), Dialect::Sqlite) => {
                format!("json_extract(attributes, '$.{k}') IN ({list})")
            }
            (RowField::Key(k), Dialect::Postgres) => {
                format!("(attributes::jsonb ->> '{k}') IN ({list})")
            }
            (RowField::AnyOf(k), Dialect::Sqlite) => format!(
                "EXISTS (SELECT 1 FROM json_each(attributes, '$.{k}') WHERE value IN ({list}))"
            ),
            (RowField::AnyOf(k), Dialect::Postgres) => format!(
                "EXISTS (SELECT 1 FROM jsonb_array_elements_text(attributes::jsonb -> '{k}') \
                 AS e(v) WHERE e.v IN ({list}))"
            ),
        };
        self.clauses.push(if c.negate {
            format!("NOT COALESCE({test}, FALSE)")
        } else {
            test
        });
    }

    fn sql(&self) -> String {
        if self.clauses.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", self.clauses.join(" AND "))
        }
    }
}

/// `SELECT CAST(COALESCE(SUM(...), 0) AS BIGINT)` over the filter.
pub(crate) fn sum_sql(
    dialect: Dialect,
    filter: &SumFilter,
    metric: Metric,
) -> (String, Vec<SqlValue>) {
    let mut w = Where::new(dialect);
    w.text("user_id", &filter.user);
    w.text("team_id", &filter.team);
    w.text("source_type", &filter.source_type);
    w.text("model", &filter.model);
    w.add("at_ms >=", SqlValue::Int(filter.since));
    w.add("at_ms <", SqlValue::Int(filter.until));
    for c in &filter.attributes {
        w.condition(c);
    }
    // Use the quota service recorded counts in its own rules, never in the limit kinds'.
    w.clauses.push("source_type <> 'quota'".into());
    (
        format!(
            "SELECT CAST(COALESCE(SUM({}), 0) AS BIGINT) FROM usage_ledger{}",
            metric_expr(metric),
            w.sql()
        ),
        w.params,
    )
}

fn group_column(dialect: Dialect, g: GroupBy) -> &'static str {
    match (g, dialect) {
        (GroupBy::User, _) => "user_id",
        (GroupBy::Team, _) => "team_id",
        (GroupBy::Model, _) => "model",
        (GroupBy::Day, _) => "day",
        (GroupBy::Hour, Dialect::Sqlite) => {
            "strftime('%Y-%m-%dT%H:00:00Z', at_ms / 1000, 'unixepoch')"
        }
        (GroupBy::Hour, Dialect::Postgres) => {
            "to_char(to_timestamp(at_ms / 1000) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24\":00:00Z\"')"
        }
    }
}

/// The grouped usage query: the group columns first, then requests and the seven sums.
pub(crate) fn query_sql(dialect: Dialect, q: &UsageQuery) -> (String, Vec<SqlValue>) {
    let mut w = Where::new(dialect);
    w.text("user_id", &q.user);
    w.text("team_id", &q.team);
    w.text("model", &q.model);
    if let Some(since) = q.since {
        w.add("at_ms >=", SqlValue::Int(since));
    }
    if let Some(until) = q.until {
        w.add("at_ms <", SqlValue::Int(until));
    }
    let groups: Vec<&str> = q
        .group_by
        .iter()
        .map(|g| group_column(dialect, *g))
        .collect();
    let sums = [
        "input_tokens",
        "cached_input_tokens",
        "output_tokens",
        "reasoning_tokens",
        "cost_micros",
        "compute_ms",
    ]
    .map(|c| format!("CAST(COALESCE(SUM({c}), 0) AS BIGINT)"))
    .join(", ");
    let mut select: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
    select.push("CAST(COUNT(*) AS BIGINT)".into());
    select.push(sums);
    let mut sql = format!("SELECT {} FROM usage_ledger{}", select.join(", "), w.sql());
    if !groups.is_empty() {
        let cols = groups.join(", ");
        // NULL keys last on both databases.
        let order: Vec<String> = groups.iter().map(|g| format!("{g} IS NULL, {g}")).collect();
        sql.push_str(&format!(" GROUP BY {cols} ORDER BY {}", order.join(", ")));
    }
    (sql, w.params)
}
