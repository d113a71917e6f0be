//! `halt_session`: a session halted by a rule is refused until the halt ends; a refusal by
//! a `halt_session` rule places the halt. A halt is a hold on the session's halt counter, of
//! the halt's end in whole seconds, expiring on its own (so every guard on the store sees it
//! and no store needs anything new).

use super::SlotRead;
use crate::guard::domain::clock::{iso8601, Millis};
use crate::guard::domain::counter::{CounterKey, ReserveItem};
use crate::guard::domain::path::Path;
use crate::guard::domain::refusal::{Reason, Refusal};
use crate::guard::domain::rule::LimitType;

/// The refusal of a call on a halted session (the halt that ends last).
pub(crate) fn halted(path: &Path, reads: &[SlotRead], now: Millis) -> Option<Refusal> {
    let (halt, end) = path
        .halts
        .iter()
        .map(|h| (h, reads[h.slot].current.held.saturating_mul(1000) as Millis))
        .filter(|(_, end)| *end > now)
        .max_by_key(|(_, end)| *end)?;
    let rule = &halt.rule;
    Some(Refusal {
        reason: Reason::LimitReached,
        limit_type: Some(LimitType::Rule),
        metric: Some(rule.spec.metric),
        amount: Some(rule.spec.amount),
        window: Some(rule.spec.window),
        resets_at: Some(end),
        retry_after_seconds: Some(((end - now).max(0) as u64).div_ceil(1000)),
        message: format!(
            "Rule \"{}\" halted this session until {}: it used its {} {}.",
            rule.name,
            iso8601(end),
            rule.spec.metric.amount_phrase(rule.spec.amount),
            rule.spec.window.phrase()
        ),
    })
}

/// The halt to place after `refusal`, when a `halt_session` rule of the path refused: the
/// ticket id to reserve it under (one per halt counter and period, so guards racing to halt
/// place one halt), the item, and its expiry minute.
pub(crate) fn halt_to_place(
    path: &Path,
    refusal: &Refusal,
    now: Millis,
) -> Option<(String, ReserveItem, i64)> {
    if refusal.limit_type != Some(LimitType::Rule) {
        return None;
    }
    let halt = path.halts.iter().find(|h| {
        let spec = &h.rule.spec;
        refusal.metric == Some(spec.metric)
            && refusal.amount == Some(spec.amount)
            && refusal.window == Some(spec.window)
    })?;
    let duration_ms = halt.rule.action_duration_seconds? as i64 * 1000;
    let end = now + duration_ms;
    let id = path.counters[halt.slot].clone();
    let ticket = format!(
        "halt-{:x}-{}",
        id.hash_value(),
        now.div_euclid(duration_ms.max(1))
    );
    let item = ReserveItem {
        key: CounterKey { id, bucket: 0 },
        hold: (end + 999).div_euclid(1000) as u64,
        limit: None,
        carried: 0,
        retain_until: end + 60_000,
    };
    Some((
        ticket,
        item,
        crate::guard::domain::counter::expiry_minute(now, duration_ms),
    ))
}
