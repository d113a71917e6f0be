//! The decision: a pure function of (path, counter snapshot, demand, now). It refuses, or
//! picks the billed source and computes what to hold on every counter. Stores never decide.
//! The steps live in `steps` (source, room, holds), the refusals in `refuse`.

mod halts;
mod refuse;
mod steps;
mod warnings;

use super::clock::Millis;
use super::counter::{CounterRead, HoldRef, ReserveItem};
use super::path::{Path, PathRule, SourceRef};
use super::policy::{Prices, Settings};
use super::refusal::Refusal;
use super::rule::CounterId;
use super::window::Window;
use std::sync::Arc;

pub(crate) use halts::halt_to_place;
pub(crate) use refuse::{caused_by_holds, does_not_fit, held_by_calls, reached};
use steps::{held_prompt, least_left, usage_ceiling, Holds, Snapshot};
pub use warnings::RuleWarning;

/// The warnings of a call from the values a store answered once it reserved (its holds
/// included): a reservation decided from known, possibly stale, values learns from them
/// which soft thresholds it really crossed.
pub(crate) fn warnings_after_reserve(
    path: &Path,
    reads: &[SlotRead],
    now: Millis,
) -> Vec<RuleWarning> {
    warnings::warnings(path, reads, None, now)
}

/// A counter's current and previous bucket as read at one instant. Holds belong to the
/// counter, not to a bucket: `current.held` is every live hold of the counter (an open call
/// counts in full in every window it overlaps), and `previous.held` is never counted again.
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
    /// The output maximum in force for each answer: the caller's, else what
    /// `settings.uncapped_output` reserves, never above the model's.
    pub max_output_tokens: u64,
    /// The answers the call asks for (`n`, `candidateCount`; at least 1): each may write
    /// `max_output_tokens`, so the call holds that many times it.
    pub answers: u64,
    /// True when the caller set no output maximum: `settings.uncapped_output` then says how
    /// much of what is left the call may hold.
    pub uncapped: bool,
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
    /// current bucket is left (sliding windows only). Its holds are the counter's, already
    /// in `current.held`.
    pub(crate) fn carried(&self, window: Window, now: Millis) -> u64 {
        window.carried(self.previous.used, now)
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
    let held = read.current.held;
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
            read.current.total(),
            read.previous.used,
            now,
        ),
    }
}

/// When `need` more fits in `rule` with no new use (the weighted previous bucket decays, the
/// current one slides out), or `None` when it never will (`need` is over the amount).
pub(crate) fn room_at(
    rule: &PathRule,
    reads: &[SlotRead],
    need: u64,
    now: Millis,
) -> Option<Millis> {
    let read = reads[rule.slot];
    rule.rule.window.room_at(
        rule.rule.amount,
        read.current.total().saturating_add(read.previous.held),
        read.previous.used,
        need,
        now,
    )
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
    /// The output maximum the call is reserved for, per answer (a call asking for `n`
    /// answers holds `n` times it).
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
    /// Generic rules past a soft threshold, or past the budget of a rule that only reports.
    pub warnings: Vec<RuleWarning>,
}

impl Plan {
    /// The holds a ticket gives back when it settles: every item with a hold.
    pub(crate) fn holds(&self) -> Vec<HoldRef> {
        // Sized for every item up front: a filtered collect would grow the vector.
        let mut out = Vec::with_capacity(self.items.len());
        out.extend(self.items.iter().filter(|i| i.hold > 0).map(|i| HoldRef {
            key: i.key.clone(),
            amount: i.hold,
        }));
        out
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

/// Decides a call: refuse, or the plan of what to hold. Pure: the same path, snapshot,
/// demand, settings and instant always give the same decision.
pub(crate) fn decide(
    path: &Path,
    reads: &[SlotRead],
    demand: &Demand,
    settings: &Settings,
    now: Millis,
) -> Decision {
    if let Some(refusal) = halts::halted(path, reads, now) {
        return Decision::Refuse(refusal);
    }
    let prompt = held_prompt(demand, settings);
    let prices = path
        .model_spec
        .as_ref()
        .map(|m| m.prices.rates(prompt))
        .unwrap_or_default();
    let needs = steps::needs(demand, settings, prompt, &prices);
    let snapshot = Snapshot {
        path,
        reads,
        now,
        needs,
    };
    // Every ceiling with nothing left refuses; then the first source with room is billed.
    if let Some(refusal) = snapshot.exhausted_ceiling() {
        return Decision::Refuse(refusal);
    }
    let billed = match snapshot.pick_source() {
        Ok(billed) => billed,
        Err(refusal) => return Decision::Refuse(refusal),
    };
    let least = least_left(path.checked_rules(billed), reads, now);
    let max_out = match snapshot.output_room(&least, demand, settings, prompt, &prices) {
        Ok(max_out) => max_out,
        Err(refusal) => return Decision::Refuse(refusal),
    };
    let holds = Holds::new(prompt, max_out, demand.answers, &prices);
    let added_slots = path.added_slots(billed);
    let (items, item_slots) = snapshot.reserve_items(billed, &added_slots, &holds);
    let source = billed
        .map(|i| path.sources[i].source.clone())
        .unwrap_or_else(|| path.default_source.clone());
    Decision::Admit(Plan {
        source_index: billed,
        source,
        items,
        item_slots,
        added_slots,
        ceiling: usage_ceiling(&least, &holds, prices, settings),
        warnings: warnings::warnings(path, reads, Some(&holds), now),
    })
}
