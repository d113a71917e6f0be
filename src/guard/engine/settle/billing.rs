//! What a bill records: the use added to each counter, and the ledger row.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::path::{Path, SourceRef};
use crate::guard::domain::rule::{CounterId, Metric};
use crate::guard::engine::observe::metrics::BilledAmounts;
use crate::guard::ledger::{Ledger, LedgerRow};
use crate::guard::store::UsageAdd;

/// What a call used, as the provider reported it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Every input token, cached ones included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The part of `input_tokens` read from a cache (billed at the cached rate).
    pub cached_input_tokens: u64,
    /// The part of `output_tokens` spent thinking (recorded, already in `output_tokens`).
    pub reasoning_tokens: u64,
    /// The call's cost; computed from the model's prices when `None`.
    pub cost_micros: Option<u64>,
    /// The call's compute time; measured from admission when `None`.
    pub compute_ms: Option<u64>,
}

/// What a bill recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Billed {
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub cost_micros: u64,
    pub compute_ms: u64,
    /// Whether the use is in the counters.
    pub recorded: Recorded,
}

/// Whether a bill's use is in the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The store took the bill (exactly once).
    Yes,
    /// The store did not answer: the bill may have landed, or may still land. The guard
    /// retries it in the background by ticket id until the store answers (for up to 5
    /// minutes); it counts exactly once if it lands at all.
    Pending,
    /// Queued: the bill settles in the background (a store across a network), exactly once
    /// by ticket id; this guard's views wait for it (`Guard::usage`).
    Queued,
}

impl Billed {
    /// What this bill adds to the metrics' billed totals.
    pub(crate) fn amounts(&self) -> BilledAmounts {
        BilledAmounts {
            input_tokens: self.input_tokens,
            cached_input_tokens: self.cached_input_tokens,
            output_tokens: self.output_tokens,
            cost_micros: self.cost_micros,
        }
    }

    /// What a bill of `usage` on `path` records: cost as given, else from the model's
    /// prices; compute time as given, else `measured_ms`.
    pub(crate) fn of(path: &Path, usage: &Usage, measured_ms: u64) -> Self {
        let prices = path
            .model_spec
            .as_ref()
            .map(|m| m.prices)
            .unwrap_or_default();
        let cost_micros = usage.cost_micros.unwrap_or_else(|| {
            prices.cost_micros(
                usage.input_tokens,
                usage.cached_input_tokens,
                usage.output_tokens,
                usage.reasoning_tokens,
            )
        });
        Billed {
            input_tokens: usage.input_tokens,
            cached_input_tokens: usage.cached_input_tokens,
            output_tokens: usage.output_tokens,
            reasoning_tokens: usage.reasoning_tokens,
            cost_micros,
            compute_ms: usage.compute_ms.unwrap_or(measured_ms),
            recorded: Recorded::Pending,
        }
    }
}

/// What a bill records in the ledger beside the usage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BillInfo {
    /// The provider's (or caller's) request id.
    pub request_id: Option<String>,
    /// Free JSON kept with the row.
    pub metadata: Option<serde_json::Value>,
}

impl BillInfo {
    /// Refuses a request id or metadata the ledger cannot store (`storable`: a NUL
    /// character). Checked before the bill claims its ticket, so the caller may bill again.
    pub(crate) fn check(&self) -> crate::error::Result<()> {
        use crate::guard::domain::caller::{storable, storable_json};
        let unbilled = |e: crate::error::Error| match e {
            crate::error::Error::InvalidArgument(mut f) => {
                f.message
                    .push_str("; nothing was billed: bill again without it");
                crate::error::Error::InvalidArgument(f)
            }
            other => other,
        };
        if let Some(id) = &self.request_id {
            storable("request_id", id).map_err(unbilled)?;
        }
        if let Some(value) = &self.metadata {
            storable_json("metadata", value).map_err(unbilled)?;
        }
        Ok(())
    }
}

/// Hands the bill's row to the ledger, built by `ledger_row` where the ledger builds it (its
/// writer thread): the billing thread only queues what the row is made of. A durable ledger
/// (or one applying backpressure) blocks until its row is committed (`runtime::blocking`: on
/// a worker, `bill_async`'s, tokio knows).
pub(crate) fn record(
    ledger: &dyn Ledger,
    path: &Arc<Path>,
    source: &SourceRef,
    ticket_id: String,
    now: Millis,
    billed: &Billed,
    info: BillInfo,
) {
    let (path, source, billed) = (path.clone(), source.clone(), *billed);
    let make = move || ledger_row(&path, &source, ticket_id, now, &billed, info);
    crate::runtime::blocking(|| ledger.record_made(Box::new(make)));
}

/// The ledger row of a bill.
pub(crate) fn ledger_row(
    path: &Path,
    source: &SourceRef,
    ticket_id: String,
    now: Millis,
    billed: &Billed,
    info: BillInfo,
) -> LedgerRow {
    let mut teams: Vec<String> = path
        .sources
        .iter()
        .flat_map(|s| s.rules.iter())
        .chain(path.ceilings.iter())
        .filter_map(|r| r.team.as_deref().map(str::to_string))
        .collect();
    teams.sort();
    teams.dedup();
    LedgerRow {
        ticket_id,
        at_ms: now,
        user: path.user.as_deref().map(str::to_string),
        teams,
        source_type: source.kind.as_str().to_string(),
        source_id: source.id.to_string(),
        model: path.model.to_string(),
        input_tokens: billed.input_tokens,
        cached_input_tokens: billed.cached_input_tokens,
        output_tokens: billed.output_tokens,
        reasoning_tokens: billed.reasoning_tokens,
        cost_micros: billed.cost_micros,
        compute_ms: billed.compute_ms,
        request_id: info.request_id,
        metadata: info.metadata,
        attributes: crate::guard::domain::recorded::row_json(&path.attributes),
    }
}

/// What a bill adds to each counter of `ids`, in the buckets of `now`.
pub(crate) fn usage_adds(ids: &[Arc<CounterId>], billed: &Billed, now: Millis) -> Vec<UsageAdd> {
    // Sized for every counter up front: a filtered collect would grow the vector.
    let mut adds = Vec::with_capacity(ids.len());
    adds.extend(ids.iter().filter_map(|id| {
        let amount = match id.metric {
            Metric::Tokens => billed.input_tokens.saturating_add(billed.output_tokens),
            Metric::InputTokens => billed.input_tokens,
            Metric::OutputTokens => billed.output_tokens,
            Metric::Cost => billed.cost_micros,
            Metric::Requests => 1,
            Metric::ComputeMs => billed.compute_ms,
            Metric::Concurrency => 0,
        };
        let bucket = id.window.bucket_start(now);
        (amount > 0).then(|| UsageAdd {
            key: crate::guard::store::CounterKey {
                id: id.clone(),
                bucket,
            },
            amount,
            retain_until: id.window.retain_until(bucket),
        })
    }));
    adds
}

/// Refuses usage whose parts exceed their wholes.
pub(crate) fn check_usage(usage: &Usage) -> Result<()> {
    let max = crate::guard::domain::policy::MAX_AMOUNT;
    for (field, value) in [
        ("input_tokens", Some(usage.input_tokens)),
        ("output_tokens", Some(usage.output_tokens)),
        ("cost_micros", usage.cost_micros),
        ("compute_ms", usage.compute_ms),
    ] {
        if let Some(value) = value.filter(|v| *v > max) {
            return Err(Error::invalid(
                field,
                value,
                format!("must be at most {max} (2^53)"),
            ));
        }
    }
    if usage.cached_input_tokens > usage.input_tokens {
        return Err(Error::invalid(
            "cached_input_tokens",
            usage.cached_input_tokens,
            format!("must not exceed input_tokens ({})", usage.input_tokens),
        ));
    }
    if usage.reasoning_tokens > usage.output_tokens {
        return Err(Error::invalid(
            "reasoning_tokens",
            usage.reasoning_tokens,
            format!("must not exceed output_tokens ({})", usage.output_tokens),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::BillInfo;

    /// A Rust caller's bill is checked as a Python one is (the check is the engine's).
    #[test]
    fn a_bills_request_id_or_metadata_holding_a_nul_is_refused() {
        let id = BillInfo {
            request_id: Some("r\0".into()),
            metadata: None,
        };
        let e = id.check().unwrap_err().to_string();
        assert!(
            e.contains("request_id") && e.contains("nothing was billed"),
            "{e}"
        );
        let metadata = BillInfo {
            request_id: Some("r1".into()),
            metadata: Some(serde_json::json!({"k": ["v\u{0}"]})),
        };
        assert!(metadata.check().is_err());
        assert!(BillInfo::default().check().is_ok());
    }
}
