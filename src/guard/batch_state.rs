//! Reading a batch's state (`BatchTicket::state`) back on any guard over the same store.

use std::sync::Arc;

use serde_json::Value;

use super::batch::{counter_key, parse_scope, parse_source_kind, parse_window, BatchTicket};
use super::guard::Guard;
use super::path::SourceRef;
use super::rule::{CounterId, Metric};
use super::store::HoldRef;
use crate::error::{Error, Result};

fn bad(field: &str, why: &str) -> Error {
    Error::invalid(&format!("state.{field}"), "", why.to_string())
}

fn text<'a>(v: &'a Value, field: &str) -> Result<&'a str> {
    v.get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| bad(field, "must be a string"))
}

fn opt_id(v: &Value, field: &str) -> Option<Arc<str>> {
    v.get(field).and_then(Value::as_str).map(Arc::from)
}

fn counter(v: &Value) -> Result<CounterId> {
    let scope = parse_scope(text(v, "scope")?).ok_or_else(|| bad("scope", "is unknown"))?;
    let metric = Metric::parse(text(v, "metric")?).ok_or_else(|| bad("metric", "is unknown"))?;
    let window = parse_window(text(v, "window")?).ok_or_else(|| bad("window", "is unknown"))?;
    Ok(CounterId::new(
        scope,
        opt_id(v, "user"),
        opt_id(v, "team"),
        opt_id(v, "model"),
        metric,
        window,
    ))
}

fn int(v: &Value, field: &str) -> Result<i64> {
    v.get(field)
        .and_then(Value::as_i64)
        .ok_or_else(|| bad(field, "must be a whole number"))
}

/// Rebuilds a batch ticket on `guard` from its state text.
pub(crate) fn resume(guard: &Guard, state: &str) -> Result<BatchTicket> {
    let v: Value = serde_json::from_str(state).map_err(|e| bad("", &e.to_string()))?;
    let user = text(&v, "user")?;
    let model = text(&v, "model")?;
    let path = guard.path(Some(user), model)?;
    let source = v.get("source").ok_or_else(|| bad("source", "is missing"))?;
    let source = SourceRef {
        kind: parse_source_kind(text(source, "type")?)
            .ok_or_else(|| bad("source.type", "is unknown"))?,
        id: Arc::from(text(source, "id")?),
    };
    let requests = v
        .get("requests")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("requests", "must be a list"))?
        .iter()
        .map(|r| r.as_str().map(str::to_string))
        .collect::<Option<Vec<String>>>()
        .ok_or_else(|| bad("requests", "must be strings"))?;
    let mut holds = Vec::new();
    for h in v
        .get("holds")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let id = counter(
            h.get("counter")
                .ok_or_else(|| bad("holds", "need a counter"))?,
        )?;
        holds.push(HoldRef {
            key: counter_key(id, int(h, "bucket")?),
            amount: int(h, "amount")?.max(0) as u64,
        });
    }
    let adds = v
        .get("adds")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|a| counter(a).map(Arc::new))
        .collect::<Result<Vec<_>>>()?;
    Ok(BatchTicket::from_parts(
        guard,
        text(&v, "id")?.to_string(),
        path,
        source,
        holds,
        int(&v, "expiry_minute")?,
        adds,
        requests,
    ))
}
