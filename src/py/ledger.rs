//! Ledgers as Python objects: `SqliteLedger`, `PostgresLedger` (query, flush, close), and the
//! flush of every ledger at interpreter exit.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::audit::audit_rows;
use super::clock::instant;
use super::convert::py_to_json;
use crate::error::Error;
use crate::guard::engine::guard::Guard;
use crate::guard::engine::settle::ticket::BillInfo;
use crate::guard::ledger::{
    flush_all, register_open, GroupBy, Ledger, LedgerError as CoreLedgerError, PostgresLedger,
    QuotaDbAt, SqliteLedger, UsageQuery,
};

fn ledger_err(e: CoreLedgerError) -> Error {
    Error::Ledger(e.0)
}

fn query(py: Python<'_>, ledger: &Arc<dyn Ledger>, q: UsageQuery) -> PyResult<Py<PyList>> {
    let l = ledger.clone();
    let groups = py.detach(move || l.query(&q)).map_err(ledger_err)?;
    let list = PyList::empty(py);
    for g in groups {
        let d = PyDict::new(py);
        for (key, value) in &g.keys {
            d.set_item(key.as_str(), value.as_deref())?;
        }
        d.set_item("requests", g.requests)?;
        d.set_item("tokens", g.tokens())?;
        d.set_item("input_tokens", g.input_tokens)?;
        d.set_item("cached_input_tokens", g.cached_input_tokens)?;
        d.set_item("output_tokens", g.output_tokens)?;
        d.set_item("reasoning_tokens", g.reasoning_tokens)?;
        d.set_item("cost_micros", g.cost_micros)?;
        d.set_item("compute_ms", g.compute_ms)?;
        list.append(d)?;
    }
    Ok(list.unbind())
}

#[allow(clippy::too_many_arguments)]
fn usage_query(
    user: Option<String>,
    team: Option<String>,
    model: Option<String>,
    since: Option<&Bound<'_, PyAny>>,
    until: Option<&Bound<'_, PyAny>>,
    group_by: Option<Vec<String>>,
) -> PyResult<UsageQuery> {
    let group_by = group_by
        .unwrap_or_else(|| vec!["user".into(), "team".into(), "model".into(), "day".into()])
        .iter()
        .map(|w| {
            w.parse::<GroupBy>().map_err(|_| {
                Error::invalid(
                    "group_by",
                    format!("{w:?}"),
                    "is not a grouping; accepted: user, team, model, day",
                )
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let at = |v: Option<&Bound<'_, PyAny>>, name: &str| -> PyResult<Option<i64>> {
        v.filter(|v| !v.is_none())
            .map(|v| instant(v, name))
            .transpose()
    };
    Ok(UsageQuery {
        user,
        team,
        model,
        since: at(since, "since")?,
        until: at(until, "until")?,
        group_by,
    })
}

macro_rules! ledger_class {
    ($ty:ident, { $($ctor:tt)* }) => {
        #[pymethods]
        impl $ty {
            $($ctor)*

            /// Usage grouped by `group_by` (default: user, team, model, day), filtered by user,
            /// billed team, model and `[since, until)` (ISO 8601 or datetime). Each group is a
            /// dict of its keys, requests, tokens, input/cached/output/reasoning tokens,
            /// cost_micros and compute_ms.
            #[pyo3(signature = (user = None, team = None, model = None, since = None, until = None, group_by = None))]
            #[allow(clippy::too_many_arguments)]
            fn query(
                &self,
                py: Python<'_>,
                user: Option<String>,
                team: Option<String>,
                model: Option<String>,
                since: Option<&Bound<'_, PyAny>>,
                until: Option<&Bound<'_, PyAny>>,
                group_by: Option<Vec<String>>,
            ) -> PyResult<Py<PyList>> {
                let q = usage_query(user, team, model, since, until, group_by)?;
                query(py, &self.inner, q)
            }

            /// The audit log's events in `[since, until)`, of one kind or rule, the latest
            /// `limit`: dicts of id, at, kind, rule, counter, threshold, principal, model, detail.
            #[pyo3(signature = (since = None, until = None, kind = None, rule = None, limit = None))]
            fn audit(
                &self,
                py: Python<'_>,
                since: Option<&Bound<'_, PyAny>>,
                until: Option<&Bound<'_, PyAny>>,
                kind: Option<String>,
                rule: Option<String>,
                limit: Option<u64>,
            ) -> PyResult<Py<PyList>> {
                audit_rows(py, &self.inner, (since, until, kind, rule, limit))
            }

            /// Waits until every row billed so far is written.
            fn flush(&self, py: Python<'_>) -> PyResult<()> {
                let l = self.inner.clone();
                Ok(py.detach(move || l.flush()).map_err(ledger_err)?)
            }

            /// Flushes and stops the writer; later rows are dropped and counted.
            fn close(&self, py: Python<'_>) -> PyResult<()> {
                let l = self.inner.clone();
                Ok(py.detach(move || l.close()).map_err(ledger_err)?)
            }

            /// `(rows waiting to be written, rows dropped)`.
            #[getter]
            fn pending(&self) -> (usize, u64) {
                self.inner.pending()
            }

            fn __repr__(&self) -> String {
                format!("{}({:?})", stringify!($ty).trim_start_matches("Py"), self.where_)
            }
        }
    };
}

/// A ledger in a SQLite file, or in memory (`":memory:"`, the default). A `kill -9` loses at
/// most about the last 250 ms of billed rows; with `durable=True`, `bill` returns only once
/// its row is committed (none lost).
#[pyclass(name = "SqliteLedger", module = "usage_guard._core", frozen)]
pub struct PySqliteLedger {
    inner: Arc<dyn Ledger>,
    where_: String,
}

ledger_class!(PySqliteLedger, {
    #[new]
    #[pyo3(signature = (path = ":memory:", *, durable = false))]
    fn new(py: Python<'_>, path: &str, durable: bool) -> PyResult<Self> {
        let p = path.to_string();
        let ledger = py
            .detach(move || {
                if durable {
                    SqliteLedger::open_durable(&p)
                } else {
                    SqliteLedger::open(&p)
                }
            })
            .map_err(ledger_err)?;
        let inner: Arc<dyn Ledger> = Arc::new(ledger);
        register_open(&inner);
        Ok(Self {
            inner,
            where_: path.to_string(),
        })
    }
});

/// A ledger in PostgreSQL (`postgres://user@host:port/db`); the table is created on first use.
/// A `kill -9` loses at most about the last 250 ms of billed rows; with `durable=True`,
/// `bill` returns only once its row is committed (none lost).
#[pyclass(name = "PostgresLedger", module = "usage_guard._core", frozen)]
pub struct PyPostgresLedger {
    inner: Arc<dyn Ledger>,
    where_: String,
    /// The URL as given (the quota tables connect to it).
    url: String,
}

ledger_class!(PyPostgresLedger, {
    #[new]
    #[pyo3(signature = (url, *, durable = false))]
    fn new(py: Python<'_>, url: String, durable: bool) -> PyResult<Self> {
        let u = url.clone();
        let ledger = py
            .detach(move || {
                if durable {
                    PostgresLedger::connect_durable(&u)
                } else {
                    PostgresLedger::connect(&u)
                }
            })
            .map_err(ledger_err)?;
        let where_ = ledger.url().to_string();
        let inner: Arc<dyn Ledger> = Arc::new(ledger);
        register_open(&inner);
        Ok(Self { inner, where_, url })
    }
});

/// The ledger behind a Python ledger object.
pub(crate) fn extract_ledger(
    ledger: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Arc<dyn Ledger>>> {
    let Some(ledger) = ledger.filter(|l| !l.is_none()) else {
        return Ok(None);
    };
    if let Ok(l) = ledger.cast::<PySqliteLedger>() {
        return Ok(Some(l.get().inner.clone()));
    }
    if let Ok(l) = ledger.cast::<PyPostgresLedger>() {
        return Ok(Some(l.get().inner.clone()));
    }
    Err(Error::wrong_type(
        "ledger",
        ledger.get_type(),
        "accepted: a SqliteLedger or a PostgresLedger",
    )
    .into())
}

/// Where a Python ledger object's database is (for the quota tables).
pub(crate) fn quota_db_at(ledger: &Bound<'_, PyAny>) -> PyResult<QuotaDbAt> {
    if let Ok(l) = ledger.cast::<PySqliteLedger>() {
        return Ok(QuotaDbAt::Sqlite(l.get().where_.clone()));
    }
    if let Ok(l) = ledger.cast::<PyPostgresLedger>() {
        return Ok(QuotaDbAt::Postgres(l.get().url.clone()));
    }
    let why = "accepted: a SqliteLedger or a PostgresLedger";
    Err(Error::wrong_type("ledger", ledger.get_type(), why).into())
}

/// Flushes the guard's ledger.
pub(crate) fn close_guard(py: Python<'_>, guard: &Guard) -> PyResult<()> {
    let g = guard.clone();
    Ok(py.detach(move || g.close()).map_err(ledger_err)?)
}

/// `request_id` / `metadata` of a bill.
pub(crate) fn bill_info(
    request_id: Option<String>,
    metadata: Option<&Bound<'_, PyAny>>,
) -> PyResult<BillInfo> {
    let metadata = metadata
        .filter(|m| !m.is_none())
        .map(|m| py_to_json(m, "metadata"))
        .transpose()?;
    Ok(BillInfo {
        request_id,
        metadata,
    })
}

/// Flushes every open ledger (registered with `atexit` by the package).
#[pyfunction]
fn _flush_ledgers(py: Python<'_>, budget_s: f64) -> Vec<String> {
    let budget = std::time::Duration::from_secs_f64(budget_s.clamp(0.0, 3600.0));
    py.detach(move || flush_all(budget))
}

/// Adds the ledger classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySqliteLedger>()?;
    m.add_class::<PyPostgresLedger>()?;
    m.add_function(wrap_pyfunction!(_flush_ledgers, m)?)
}
