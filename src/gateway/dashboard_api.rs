//! The admin JSON the dashboard draws: usage over time from the ledger
//! (`/admin/usage/series`), every rule's live counter (`/admin/dashboard/counters`) and the
//! refusals this server counted by reason (`/admin/refusals`). Each needs the admin token.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Value};

use super::admin::{admin_ledger, error, refused, rule_json};
use super::proxy::App;
use super::shape::json_response;
use crate::error::Error;
use crate::guard::domain::clock::{iso8601, parse_iso8601, Millis};
use crate::guard::ledger::{GroupBy, Ledger, LedgerError, UsageGroup, UsageQuery};

type Params = Query<HashMap<String, String>>;

const HOUR_MS: Millis = 3_600_000;
const DAY_MS: Millis = 86_400_000;
/// The most buckets one series answers.
const MAX_BUCKETS: i64 = 1_000;
/// The most groups one series answer draws: those with the most tokens (the rest counted
/// in `groups`), so a ledger of many users cannot make an answer of gigabytes.
const MAX_SERIES: usize = 50;
/// The most (person, model) pairs `counters` reads.
const MAX_PAIRS: usize = 200;

#[derive(Debug)]
/// What `series` was asked: buckets of `step` ms in `[since, until)`, one series per `group`.
struct SeriesAsk {
    step: Millis,
    bucket: GroupBy,
    group: GroupBy,
    since: Millis,
    until: Millis,
}

fn series_ask(q: &HashMap<String, String>, now: Millis) -> Result<SeriesAsk, String> {
    let (bucket, step, span) = match q.get("bucket").map(String::as_str).unwrap_or("hour") {
        "hour" => (GroupBy::Hour, HOUR_MS, 24),
        "day" => (GroupBy::Day, DAY_MS, 30),
        other => return Err(format!("bucket: {other:?}; accepted: hour, day")),
    };
    let group = match q.get("group").map(String::as_str).unwrap_or("user") {
        "user" => GroupBy::User,
        "team" => GroupBy::Team,
        "model" => GroupBy::Model,
        other => return Err(format!("group: {other:?}; accepted: user, team, model")),
    };
    let instant = |name: &str| -> Result<Option<Millis>, String> {
        q.get(name)
            .map(|t| {
                parse_iso8601(t).ok_or(format!(
                    "{name}: {t:?} is not a date or an ISO 8601 instant"
                ))
            })
            .transpose()
    };
    // Whole buckets: the one holding `now` is the last.
    let until = instant("until")?.unwrap_or(now.div_euclid(step) * step + step);
    let until = until.div_euclid(step) * step + if until % step == 0 { 0 } else { step };
    let since = instant("since")?.unwrap_or(until - span * step);
    let since = since.div_euclid(step) * step;
    if since >= until || (until - since) / step > MAX_BUCKETS {
        return Err(format!(
            "since must be before until, at most {MAX_BUCKETS} buckets apart"
        ));
    }
    Ok(SeriesAsk {
        step,
        bucket,
        group,
        since,
        until,
    })
}

/// The start (ms) of a bucket key: `YYYY-MM-DD` or `YYYY-MM-DDTHH:00:00Z`.
fn bucket_start(key: &str) -> Option<Millis> {
    if key.len() == 10 {
        parse_iso8601(&format!("{key}T00:00:00Z"))
    } else {
        parse_iso8601(key)
    }
}

fn totals_json(key: &Option<String>, g: &UsageGroup) -> Value {
    json!({
        "key": key,
        "requests": g.requests,
        "tokens": g.tokens(),
        "input_tokens": g.input_tokens,
        "output_tokens": g.output_tokens,
        "cost_micros": g.cost_micros,
    })
}

/// The `MAX_SERIES` groups of `totals` with the most tokens (ties: cost, then requests), in
/// the ledger's order.
fn largest(totals: &[UsageGroup]) -> Vec<&UsageGroup> {
    if totals.len() <= MAX_SERIES {
        return totals.iter().collect();
    }
    let mut by_size: Vec<usize> = (0..totals.len()).collect();
    let size = |g: &UsageGroup| (g.tokens(), g.cost_micros, g.requests);
    by_size.sort_by(|&a, &b| size(&totals[b]).cmp(&size(&totals[a])));
    by_size.truncate(MAX_SERIES);
    by_size.sort_unstable();
    by_size.into_iter().map(|i| &totals[i]).collect()
}

fn series_json(ask: &SeriesAsk, cells: &[UsageGroup], all: &[UsageGroup]) -> Value {
    let n = ((ask.until - ask.since) / ask.step) as usize;
    let totals = largest(all);
    let order: Vec<Option<String>> = totals
        .iter()
        .map(|g| g.keys.first().and_then(|k| k.1.clone()))
        .collect();
    let line_of: HashMap<Option<&str>, usize> = order
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_deref(), i))
        .collect();
    let mut lines: Vec<[Vec<u64>; 3]> = order
        .iter()
        .map(|_| [vec![0; n], vec![0; n], vec![0; n]])
        .collect();
    for cell in cells {
        let start = cell
            .keys
            .first()
            .and_then(|k| k.1.as_deref())
            .and_then(bucket_start);
        let key = cell.keys.get(1).and_then(|k| k.1.as_deref());
        let (Some(start), Some(&line)) = (start, line_of.get(&key)) else {
            continue;
        };
        let i = ((start - ask.since) / ask.step) as usize;
        if start >= ask.since && i < n {
            lines[line][0][i] += cell.tokens();
            lines[line][1][i] += cell.cost_micros;
            lines[line][2][i] += cell.requests;
        }
    }
    let series: Vec<Value> = order
        .iter()
        .zip(lines)
        .map(|(key, [tokens, cost, requests])| {
            json!({"key": key, "tokens": tokens, "cost_micros": cost, "requests": requests})
        })
        .collect();
    json!({
        "bucket": ask.bucket.as_str(),
        "group": ask.group.as_str(),
        "since": iso8601(ask.since),
        "until": iso8601(ask.until),
        "t": (0..n as i64).map(|i| (ask.since + i * ask.step) / 1000).collect::<Vec<_>>(),
        "series": series,
        "totals": order.iter().zip(totals).map(|(k, g)| totals_json(k, g)).collect::<Vec<_>>(),
        "groups": all.len(),
    })
}

async fn query(
    ledger: Arc<dyn Ledger>,
    queries: Vec<UsageQuery>,
) -> Result<Vec<Vec<UsageGroup>>, Response<Body>> {
    blocking(move || queries.iter().map(|q| ledger.query(q)).collect()).await
}

/// `work` (ledger queries) on the blocking pool; its failure as the answer to give.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, LedgerError> + Send + 'static,
) -> Result<T, Response<Body>> {
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(groups)) => Ok(groups),
        Ok(Err(e)) => Err(error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())),
        Err(_) => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the ledger query failed",
        )),
    }
}

/// `GET /admin/usage/series?group=user|team|model&bucket=hour|day&since=&until=&user=&team=&model=`:
/// usage per bucket and group from the ledger (tokens, cost, requests; every bucket in
/// `[since, until)`, empty ones 0), and each group's totals over the range (by default the
/// last 24 hours, or 30 days).
pub(crate) async fn series(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Params,
) -> Response<Body> {
    let ledger = match admin_ledger(&app, &headers) {
        Ok(ledger) => ledger,
        Err(response) => return *response,
    };
    let ask = match series_ask(&q, app.guard.clock().now_ms()) {
        Ok(ask) => ask,
        Err(message) => return error(StatusCode::BAD_REQUEST, &message),
    };
    let base = UsageQuery {
        user: q.get("user").cloned(),
        team: q.get("team").cloned(),
        model: q.get("model").cloned(),
        since: Some(ask.since),
        until: Some(ask.until),
        group_by: vec![ask.bucket, ask.group],
    };
    let totals = UsageQuery {
        group_by: vec![ask.group],
        ..base.clone()
    };
    // Built where the queries run: with many groups and buckets, not on a serving thread.
    let built = blocking(move || {
        let cells = ledger.query(&base)?;
        Ok(series_json(&ask, &cells, &ledger.query(&totals)?))
    });
    match built.await {
        Ok(answer) => json_response(StatusCode::OK, &answer),
        Err(r) => r,
    }
}

/// The (person, model) pairs whose rules the dashboard shows: one person's on every model,
/// or everyone's the policy names (direct limits, team members on their team's models) and
/// the ledger saw; only models of the policy.
async fn pairs(app: &App, user: Option<&String>) -> Result<Vec<(String, String)>, Response<Body>> {
    let policy = app.guard.policy();
    let models: BTreeSet<&str> = policy.models.iter().map(|m| &*m.id).collect();
    let mut pairs = BTreeSet::new();
    if let Some(user) = user {
        pairs.extend(models.iter().map(|m| (user.clone(), m.to_string())));
        return Ok(pairs.into_iter().collect());
    }
    for d in &policy.direct {
        pairs.insert((d.user.to_string(), d.model.to_string()));
    }
    for limit in &policy.team {
        let members = policy.teams.iter().filter(|t| t.id == limit.team);
        for member in members.flat_map(|t| t.members.iter()) {
            pairs.insert((member.to_string(), limit.model.to_string()));
        }
    }
    if let Some(ledger) = app.guard.ledger().cloned() {
        let seen = UsageQuery {
            group_by: vec![GroupBy::User, GroupBy::Model],
            ..UsageQuery::default()
        };
        for g in query(ledger, vec![seen]).await?.remove(0) {
            if let [(_, Some(user)), (_, Some(model))] = &g.keys[..] {
                pairs.insert((user.clone(), model.clone()));
            }
        }
    }
    Ok(pairs
        .into_iter()
        .filter(|(_, m)| models.contains(m.as_str()))
        .collect())
}

/// `GET /admin/dashboard/counters?user=`: every rule's live counter (used, reserved, left,
/// resets at) for each person and model with rules (one person's, given `user`).
pub(crate) async fn counters(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Params,
) -> Response<Body> {
    if let Some(r) = refused(&app, &headers) {
        return r;
    }
    let mut pairs = match pairs(&app, q.get("user")).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let truncated = pairs.len() > MAX_PAIRS;
    pairs.truncate(MAX_PAIRS);
    let mut rows = Vec::new();
    for (user, model) in &pairs {
        let view = match app.guard.usage(Some(user), model).await {
            Ok(view) => view,
            Err(Error::Refused(r)) => return error(StatusCode::SERVICE_UNAVAILABLE, &r.message),
            Err(_) => continue,
        };
        if view.rules.is_empty() && view.ceilings.is_empty() {
            continue;
        }
        rows.push(json!({
            "principal": user,
            "model": model,
            "source": {"type": view.source.kind.as_str(), "id": &*view.source.id},
            "rules": view.rules.iter().map(rule_json).collect::<Vec<_>>(),
            "ceilings": view.ceilings.iter().map(rule_json).collect::<Vec<_>>(),
        }));
    }
    json_response(
        StatusCode::OK,
        &json!({"counters": rows, "truncated": truncated}),
    )
}

/// `GET /admin/refusals`: the refusals this server answered since it started, by reason and
/// limit type, and the guard's own counts.
pub(crate) async fn refusals(State(app): State<Arc<App>>, headers: HeaderMap) -> Response<Body> {
    if let Some(r) = refused(&app, &headers) {
        return r;
    }
    // The guard's refusals by reason and limit type (the family `/metrics` renders as
    // `usage_guard_refusals_total`).
    let by_reason: Vec<Value> = app
        .guard
        .metrics()
        .into_iter()
        .filter(|family| family.name == "usage_guard_refusals")
        .flat_map(|family| family.samples)
        .map(|sample| {
            let mut row: serde_json::Map<String, Value> = sample
                .labels
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            row.insert("count".into(), json!(sample.value as u64));
            Value::Object(row)
        })
        .collect();
    let stats = app.guard.stats();
    json_response(
        StatusCode::OK,
        &json!({
            "by_reason": by_reason,
            "guard": {
                "admitted": stats.admitted.load(Ordering::Relaxed),
                "refused": stats.refused.load(Ordering::Relaxed),
                "unavailable": stats.unavailable.load(Ordering::Relaxed),
                "recovering": stats.recovering.load(Ordering::Relaxed),
            },
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_whole_buckets_ending_after_now() {
        let now = parse_iso8601("2026-12-02T10:30:00Z").unwrap();
        let ask = series_ask(&HashMap::new(), now).unwrap();
        assert_eq!(iso8601(ask.until), "2026-12-02T11:00:00Z");
        assert_eq!(iso8601(ask.since), "2026-12-01T11:00:00Z");
        let q = HashMap::from([("bucket".to_string(), "week".to_string())]);
        assert!(series_ask(&q, now)
            .unwrap_err()
            .contains("accepted: hour, day"));
        assert_eq!(
            bucket_start("2026-12-02"),
            parse_iso8601("2026-12-02T00:00:00Z")
        );
    }
}
