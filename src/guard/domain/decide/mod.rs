//! The decision: a pure function of (path, counter snapshot, demand, now). It refuses, or
//! picks the billed source and computes what to hold on every counter. Stores never decide.

use super::clock::{iso8601, Millis};
use super::counter::{CounterKey, CounterRead, HoldRef, ReserveItem};
use super::message;
use super::path::{Path, PathRule, SourceKind, SourceRef};
use super::policy::{Prices, Settings};
use super::refusal::{Reason, Refusal};
use super::rule::CounterId;
use super::rule::Metric;
use super::window::Window;
use std::sync::Arc;

/// A counter's current and previous bucket as read at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SlotRead {
    pub current: CounterRead,
    pub previous: CounterRead,
}

/// What the call may use, before it runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Demand {
    pub prompt_tokens: u64,
    /// Whether the prompt count is an estimate (then `margin` is kept free).
    pub prompt_is_estimate: bool,
    /// The output maximum in force: the caller's, else the model's, else the default,
    /// never above the model's.
    pub max_output_tokens: u64,
}

/// A rule's state at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RuleState {
    /// Billed use + live holds + what the previous bucket carries.
    pub counted: u64,
    pub used: u64,
    pub held: u64,
    pub left: u64,
    pub resets_at: Option<Millis>,
}

impl SlotRead {
    /// What the previous bucket adds at `now`: its billed use weighted by how much of the
    /// current bucket is left (sliding windows only), plus its live holds in full — a call
    /// admitted in the previous bucket bills into the current one.
    pub(crate) fn carried(&self, window: Window, now: Millis) -> u64 {
        window
            .carried(self.previous.used, now)
            .saturating_add(self.previous.held)
    }

    /// Billed use + live holds + what the previous bucket carries.
    pub(crate) fn counted(&self, window: Window, now: Millis) -> u64 {
        self.current
            .total()
            .saturating_add(self.carried(window, now))
    }
}

/// What is left of `rule` given the snapshot (the hot path: no reset computed).
pub(crate) fn rule_left(rule: &PathRule, reads: &[SlotRead], now: Millis) -> u64 {
    let counted = reads[rule.slot].counted(rule.rule.window, now);
    rule.rule.amount.saturating_sub(counted)
}

/// The state of `rule` given the snapshot.
pub(crate) fn rule_state(rule: &PathRule, reads: &[SlotRead], now: Millis) -> RuleState {
    let read = reads[rule.slot];
    let window = rule.rule.window;
    let counted = read.counted(window, now);
    let held = read.current.held.saturating_add(read.previous.held);
    RuleState {
        counted,
        used: read
            .current
            .used
            .saturating_add(window.carried(read.previous.used, now)),
        held,
        left: rule.rule.amount.saturating_sub(counted),
        resets_at: window.resets_at(
            rule.rule.amount,
            read.current.total().saturating_add(read.previous.held),
            read.previous.used,
            now,
        ),
    }
}

/// The usage ceiling handed to the client: what the call may use.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageCeiling {
    /// Tokens held for the call, prompt and output; `None` when no token rule applies.
    pub tokens: Option<u64>,
    /// Micro-dollars held for the call; `None` when no cost rule applies.
    pub cost_micros: Option<u64>,
    /// The model's prices, when `cost_micros` is set.
    pub rates: Option<Prices>,
    /// The output maximum the call is reserved for.
    pub max_output_tokens: u64,
    pub min_output_tokens: u64,
    pub margin: f64,
}

/// An admission to reserve.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    /// Index into `path.sources`, or `None` for the default (unlimited) source.
    pub source_index: Option<usize>,
    pub source: SourceRef,
    /// Holds and checks, one per counter the call adds to (zero holds without a limit are
    /// left out).
    pub items: Vec<ReserveItem>,
    /// The slot of each item.
    pub item_slots: Vec<usize>,
    /// The counters the call adds its use to at bill.
    pub added_slots: Vec<usize>,
    pub ceiling: UsageCeiling,
}

impl Plan {
    /// The holds a ticket gives back when it settles: every item with a hold.
    pub(crate) fn holds(&self) -> Vec<HoldRef> {
        self.items
            .iter()
            .filter(|i| i.hold > 0)
            .map(|i| HoldRef {
                key: i.key.clone(),
                amount: i.hold,
            })
            .collect()
    }

    /// The counters the call adds its use to at bill.
    pub(crate) fn added_counters(&self, path: &Path) -> Vec<Arc<CounterId>> {
        self.added_slots
            .iter()
            .map(|&s| path.counters[s].clone())
            .collect()
    }
}

/// Refuse, or admit with a plan.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    Admit(Plan),
    Refuse(Refusal),
}

/// The refusal for a rule with nothing left.
pub(crate) fn reached(path: &Path, rule: &PathRule, state: &RuleState, now: Millis) -> Refusal {
    let mut message = message::reached(path, rule, &rule.team_name);
    match state.resets_at {
        Some(at) => message.push_str(&format!(" It resets at {}.", iso8601(at))),
        None if rule.rule.metric == Metric::Concurrency => {
            message.push_str(" It frees up when one of them ends.")
        }
        None => {}
    }
    refusal(Reason::LimitReached, rule, state.resets_at, message, now)
}

/// The refusal for a call that does not fit in what is left of `rule`.
pub(crate) fn does_not_fit(
    path: &Path,
    rule: &PathRule,
    left: u64,
    resets_at: Option<Millis>,
    now: Millis,
) -> Refusal {
    let message = message::does_not_fit(path, rule, &rule.team_name, left);
    refusal(Reason::DoesNotFit, rule, resets_at, message, now)
}

fn refusal(
    reason: Reason,
    rule: &PathRule,
    resets_at: Option<Millis>,
    message: String,
    now: Millis,
) -> Refusal {
    Refusal {
        reason,
        limit_type: Some(rule.limit_type),
        metric: Some(rule.rule.metric),
        amount: Some(rule.rule.amount),
        window: Some(rule.rule.window),
        resets_at,
        retry_after_seconds: resets_at.map(|at| ((at - now).max(0) as u64).div_ceil(1000)),
        message,
    }
}

/// Of the exhausted rules, the one that frees up last (the honest time to come back).
fn latest_exhausted<'p>(
    rules: impl Iterator<Item = &'p PathRule>,
    reads: &[SlotRead],
    now: Millis,
) -> Option<(&'p PathRule, RuleState)> {
    rules
        .filter(|r| rule_left(r, reads, now) == 0)
        .map(|r| (r, rule_state(r, reads, now)))
        .max_by_key(|(_, s)| s.resets_at.unwrap_or(Millis::MAX))
}

/// The least left per metric across `rules` (indexed by `Metric as usize`), with the rule
/// that sets it.
fn least_left<'p>(
    rules: impl Iterator<Item = &'p PathRule>,
    reads: &[SlotRead],
    now: Millis,
) -> [Option<(u64, &'p PathRule)>; 7] {
    let mut least: [Option<(u64, &PathRule)>; 7] = [None; 7];
    for rule in rules {
        let left = rule_left(rule, reads, now);
        let entry = &mut least[rule.rule.metric as usize];
        if entry.is_none_or(|(l, _)| left < l) {
            *entry = Some((left, rule));
        }
    }
    least
}

/// Decides a call: refuse, or the plan of what to hold.
pub(crate) fn decide(
    path: &Path,
    reads: &[SlotRead],
    demand: &Demand,
    settings: &Settings,
    now: Millis,
) -> Decision {
    // Every ceiling with nothing left refuses.
    if let Some((rule, state)) = latest_exhausted(path.ceilings.iter(), reads, now) {
        return Decision::Refuse(reached(path, rule, &state, now));
    }
    // The first source with room is billed; a team with nothing left passes the call on.
    let mut billed = None;
    let mut team_refusal = None;
    for (i, source) in path.sources.iter().enumerate() {
        match latest_exhausted(source.rules.iter(), reads, now) {
            None => {
                billed = Some(i);
                break;
            }
            Some((rule, state)) => {
                let refusal = reached(path, rule, &state, now);
                if source.source.kind != SourceKind::Team {
                    return Decision::Refuse(refusal);
                }
                team_refusal.get_or_insert(refusal);
            }
        }
    }
    if billed.is_none() {
        if let Some(refusal) = team_refusal {
            return Decision::Refuse(refusal);
        }
    }

    let left = least_left(path.checked_rules(billed), reads, now);
    // An estimated prompt is held with the margin the client keeps free when it fits the call.
    let prompt = if demand.prompt_is_estimate {
        let margin = (demand.prompt_tokens as f64 * settings.margin).ceil() as u64;
        demand.prompt_tokens.saturating_add(margin)
    } else {
        demand.prompt_tokens
    };
    let prices = path
        .model_spec
        .as_ref()
        .map(|m| m.prices)
        .unwrap_or_default();
    let left_of = |metric: Metric| left[metric as usize].map(|(l, _)| l);
    let not_fit = |metric: Metric| {
        let (l, rule) = left[metric as usize].expect("a rule of that metric");
        let resets_at = rule_state(rule, reads, now).resets_at;
        Decision::Refuse(does_not_fit(path, rule, l, resets_at, now))
    };

    let mut max_out = demand.max_output_tokens;
    let mut bound_by: Option<Metric> = None;
    let mut lower = |max_out: &mut u64, room: u64, metric: Metric| {
        if room < *max_out {
            *max_out = room;
            bound_by = Some(metric);
        }
    };
    if let Some(l) = left_of(Metric::InputTokens) {
        if prompt > l {
            return not_fit(Metric::InputTokens);
        }
    }
    if let Some(l) = left_of(Metric::OutputTokens) {
        lower(&mut max_out, l, Metric::OutputTokens);
    }
    if let Some(l) = left_of(Metric::Tokens) {
        if prompt > l {
            return not_fit(Metric::Tokens);
        }
        lower(&mut max_out, l - prompt, Metric::Tokens);
    }
    if let Some(l) = left_of(Metric::Cost) {
        let prompt_cost = prices.dearest_cost_micros(prompt, 0);
        if prompt_cost > l {
            return not_fit(Metric::Cost);
        }
        if prices.output > 0 {
            let room = ((l - prompt_cost) as u128 * 1_000_000 / prices.output as u128)
                .min(u64::MAX as u128) as u64;
            lower(&mut max_out, room, Metric::Cost);
        }
    }
    // Refuse what cannot produce at least the smaller of min_output_tokens and what the
    // caller asked for.
    if let Some(metric) = bound_by {
        let need = settings.min_output_tokens.min(demand.max_output_tokens);
        if max_out < need {
            return not_fit(metric);
        }
    }

    let tokens_hold = prompt.saturating_add(max_out);
    let cost_hold = prices.dearest_cost_micros(prompt, max_out);
    let ceiling = UsageCeiling {
        tokens: left_of(Metric::Tokens).map(|l| tokens_hold.min(l)),
        cost_micros: left_of(Metric::Cost).map(|l| cost_hold.min(l)),
        rates: left_of(Metric::Cost).map(|_| prices),
        max_output_tokens: max_out,
        min_output_tokens: settings.min_output_tokens,
        margin: settings.margin,
    };

    let mut limits: Vec<Option<u64>> = vec![None; path.counters.len()];
    for rule in path.checked_rules(billed) {
        let limit = &mut limits[rule.slot];
        *limit = Some(limit.map_or(rule.rule.amount, |l| l.min(rule.rule.amount)));
    }
    let added_slots = path.added_slots(billed);
    let mut items = Vec::with_capacity(added_slots.len());
    let mut item_slots = Vec::with_capacity(added_slots.len());
    for &slot in &added_slots {
        let id = &path.counters[slot];
        let hold = match id.metric {
            Metric::Tokens => tokens_hold,
            Metric::InputTokens => prompt,
            Metric::OutputTokens => max_out,
            Metric::Cost => cost_hold,
            Metric::Requests | Metric::Concurrency => 1,
            Metric::ComputeMs => 0,
        };
        let limit = limits[slot];
        if hold == 0 && limit.is_none() {
            continue;
        }
        let bucket = id.window.bucket_start(now);
        items.push(ReserveItem {
            key: CounterKey {
                id: id.clone(),
                bucket,
            },
            hold,
            limit,
            carried: reads[slot].carried(id.window, now),
            retain_until: id.window.retain_until(bucket),
        });
        item_slots.push(slot);
    }
    let source = billed
        .map(|i| path.sources[i].source.clone())
        .unwrap_or_else(|| path.default_source.clone());
    Decision::Admit(Plan {
        source_index: billed,
        source,
        items,
        item_slots,
        added_slots,
        ceiling,
    })
}
