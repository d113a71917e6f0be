//! A ledger's audit log as Python dicts (`SqliteLedger.audit`, `PostgresLedger.audit`).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::clock::instant;
use super::convert::json_to_py;
use crate::error::Error;
use crate::guard::domain::clock::iso8601;
use crate::guard::domain::event::EventKind;
use crate::guard::ledger::{AuditQuery, Ledger, STORE_EPOCH};

/// The filters of `ledger.audit(...)`: `[since, until)` (ISO 8601 or datetime), a kind, a
/// rule, and the latest `limit` rows.
pub(crate) type AuditArgs<'a, 'py> = (
    Option<&'a Bound<'py, PyAny>>,
    Option<&'a Bound<'py, PyAny>>,
    Option<String>,
    Option<String>,
    Option<u64>,
);

fn audit_query((since, until, kind, rule, limit): AuditArgs<'_, '_>) -> PyResult<AuditQuery> {
    let at = |v: Option<&Bound<'_, PyAny>>, name: &str| -> PyResult<Option<i64>> {
        v.filter(|v| !v.is_none())
            .map(|v| instant(v, name))
            .transpose()
    };
    let known = |k: &str| k.parse::<EventKind>().is_ok() || k == STORE_EPOCH;
    if let Some(k) = kind.as_deref().filter(|k| !known(k)) {
        let mut words: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        words.push(STORE_EPOCH);
        let why = format!("is not an audit kind; accepted: {}", words.join(", "));
        return Err(Error::invalid("kind", format!("{k:?}"), why).into());
    }
    Ok(AuditQuery {
        since: at(since, "since")?,
        until: at(until, "until")?,
        kind,
        rule,
        limit,
    })
}

/// The audit rows the filters select, oldest first, as dicts of id, at, kind, rule,
/// counter, threshold, principal, model and detail.
pub(crate) fn audit_rows(
    py: Python<'_>,
    ledger: &Arc<dyn Ledger>,
    args: AuditArgs<'_, '_>,
) -> PyResult<Py<PyList>> {
    let query = audit_query(args)?;
    let l = ledger.clone();
    let rows = py
        .detach(move || l.audit(&query))
        .map_err(|e| Error::Ledger(e.0))?;
    let list = PyList::empty(py);
    for r in rows {
        let d = PyDict::new(py);
        d.set_item("id", &r.event_id)?;
        d.set_item("at", iso8601(r.at_ms))?;
        d.set_item("kind", &r.kind)?;
        d.set_item("rule", &r.rule)?;
        d.set_item("counter", &r.counter_key)?;
        d.set_item("threshold", r.threshold)?;
        d.set_item("principal", r.principal.as_deref())?;
        d.set_item("model", r.model.as_deref())?;
        d.set_item("detail", json_to_py(py, &r.detail)?)?;
        list.append(d)?;
    }
    Ok(list.unbind())
}
