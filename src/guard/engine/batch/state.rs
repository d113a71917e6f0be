//! Reading a batch's state (`BatchTicket::state`) back on any guard over the same store.

use std::sync::Arc;

use serde_json::Value;

use serde_json::json;

use crate::error::{Error, Result};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::path::SourceRef;
use crate::guard::domain::rule::Scope;
use crate::guard::domain::rule::{CounterId, Metric};
use crate::guard::domain::window::Window;
use crate::guard::engine::batch::batch_ticket::BatchTicket;
use crate::guard::engine::handle::Guard;
use crate::guard::store::CounterKey;
use crate::guard::store::HoldRef;

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
    let metric = text(v, "metric")?
        .parse::<Metric>()
        .map_err(|_| bad("metric", "is unknown"))?;
    let window =
        Window::from_key_token(text(v, "window")?).ok_or_else(|| bad("window", "is unknown"))?;
    if let Some(subject) = opt_id(v, "subject") {
        return Ok(CounterId::rule(subject, metric, window));
    }
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
impl Guard {
    /// The work of [`Guard::resume_batch`].
    pub(crate) fn resume_batch_from(&self, state: &str) -> Result<BatchTicket> {
        resume(self, state)
    }
}

fn resume(guard: &Guard, state: &str) -> Result<BatchTicket> {
    let v: Value = serde_json::from_str(state).map_err(|e| bad("", &e.to_string()))?;
    // Its ids and sources go to the ledger's rows.
    crate::guard::domain::caller::storable_json("state", &v)?;
    let user = text(&v, "user")?;
    let model = text(&v, "model")?;
    let attributes = attributes(&v)?;
    let path = guard
        .shared
        .resolve_with(Some(user), model, &attributes)?
        .path;
    let source = v.get("source").ok_or_else(|| bad("source", "is missing"))?;
    let source = SourceRef {
        kind: text(source, "type")?
            .parse()
            .map_err(|_| bad("source.type", "is unknown"))?,
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
    Ok(BatchTicket {
        shared: guard.shared.clone(),
        id: text(&v, "id")?.to_string(),
        path,
        source,
        holds,
        expiry_minute: int(&v, "expiry_minute")?,
        adds,
        request_ids: requests,
        attributes,
    })
}

/// The batch's attributes (none in a state written before batches had them).
fn attributes(v: &Value) -> Result<Vec<(String, String)>> {
    let Some(map) = v.get("attributes").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    map.iter()
        .map(|(k, v)| {
            v.as_str()
                .map(|s| (k.clone(), s.to_string()))
                .ok_or_else(|| bad("attributes", "must map names to strings"))
        })
        .collect()
}

impl BatchTicket {
    /// The batch as JSON text, for `Guard::resume_batch` on another server.
    pub fn state(&self) -> String {
        let counter = |id: &CounterId| {
            json!({
                "scope": id.scope.key_token(),
                "user": id.user.as_deref(),
                "team": id.team.as_deref(),
                "model": id.model.as_deref(),
                "metric": id.metric.as_str(),
                "window": id.window.key_token(),
                "subject": id.subject.as_deref(),
            })
        };
        json!({
            "id": self.id,
            "user": self.path.user.as_deref(),
            "model": &*self.path.model,
            "source": {"type": self.source.kind.as_str(), "id": &*self.source.id},
            "expiry_minute": self.expiry_minute,
            "requests": self.request_ids,
            "attributes": self.attributes.iter()
                .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                .collect::<serde_json::Map<String, Value>>(),
            "holds": self.holds.iter().map(|h| json!({
                "counter": counter(&h.key.id), "bucket": h.key.bucket, "amount": h.amount,
            })).collect::<Vec<Value>>(),
            "adds": self.adds.iter().map(|id| counter(id)).collect::<Vec<Value>>(),
        })
        .to_string()
    }
}

/// Parses the scope token of a counter key.
fn parse_scope(token: &str) -> Option<Scope> {
    [
        Scope::PersonModel,
        Scope::TeamShared,
        Scope::TeamMember,
        Scope::PublicShared,
        Scope::TeamTotal,
        Scope::ModelTotal,
        Scope::PersonAllModels,
        Scope::Rule,
    ]
    .into_iter()
    .find(|s| s.key_token() == token)
}

fn counter_key(id: CounterId, bucket: Millis) -> CounterKey {
    CounterKey {
        id: Arc::new(id),
        bucket,
    }
}
