//! The steps of a decision: refuse on an exhausted ceiling, pick the billed source, fit the
//! output in what is left, and lay out the holds to reserve. Pure functions of the snapshot.

use super::refuse::{caused_by_holds, held_by_calls};
use super::{
    does_not_fit, reached, room_at, rule_left, rule_state, Demand, RuleState, SlotRead,
    UsageCeiling,
};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::counter::{CounterKey, ReserveItem};
use crate::guard::domain::path::{Path, PathRule, SourceKind};
use crate::guard::domain::policy::{Prices, Settings};
use crate::guard::domain::refusal::Refusal;
use crate::guard::domain::room::{cost_output_room, with_margin};
use crate::guard::domain::rule::Metric;

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

/// The least left per metric (indexed by `Metric as usize`), with the rule that sets it.
pub(super) type Least<'p> = [Option<(u64, &'p PathRule)>; 7];

/// The least left per metric across `rules`, with the rule that sets it.
pub(super) fn least_left<'p>(
    rules: impl Iterator<Item = &'p PathRule>,
    reads: &[SlotRead],
    now: Millis,
) -> Least<'p> {
    let mut least: Least<'p> = [None; 7];
    for rule in rules {
        let left = rule_left(rule, reads, now);
        let entry = &mut least[rule.rule.metric as usize];
        if entry.is_none_or(|(l, _)| left < l) {
            *entry = Some((left, rule));
        }
    }
    least
}

fn left_of(least: &Least, metric: Metric) -> Option<u64> {
    least[metric as usize].map(|(l, _)| l)
}

/// The prompt as held: an estimated prompt is held with the margin the client keeps free
/// when it fits the call.
pub(super) fn held_prompt(demand: &Demand, settings: &Settings) -> u64 {
    with_margin(
        demand.prompt_tokens,
        demand.prompt_is_estimate,
        settings.margin,
    )
}

/// What the call holds on counters of each metric.
pub(super) struct Holds {
    prompt: u64,
    /// Per answer.
    max_out: u64,
    /// Every answer's: `max_out` × answers.
    out: u64,
    tokens: u64,
    cost: u64,
}

impl Holds {
    /// `max_out` is per answer: `answers` of them are held.
    pub(super) fn new(prompt: u64, max_out: u64, answers: u64, prices: &Prices) -> Self {
        let out = max_out.saturating_mul(answers.max(1));
        // The prompt and the output each rounded up, as the fit takes them apart: the cost
        // held then pays for the whole output maximum (`cost_output_room` of it ≥ out),
        // so a roomy cost rule never lowers the output by a rounding.
        let cost = prices
            .dearest_cost_micros(prompt, 0)
            .saturating_add(prices.dearest_cost_micros(0, out));
        Holds {
            prompt,
            max_out,
            out,
            tokens: prompt.saturating_add(out),
            cost,
        }
    }

    pub(super) fn of(&self, metric: Metric) -> u64 {
        match metric {
            Metric::Tokens => self.tokens,
            Metric::InputTokens => self.prompt,
            Metric::OutputTokens => self.out,
            Metric::Cost => self.cost,
            Metric::Requests | Metric::Concurrency => 1,
            Metric::ComputeMs => 0,
        }
    }
}

/// What a call needs of each metric to run with its least output (indexed by
/// `Metric as usize`): what a refusal waits for, and what tells a refusal caused by calls in
/// progress from one caused by use.
pub(super) type Needs = [u64; 7];

/// The least output the call can run with (the smaller of `min_output_tokens` and the
/// caller's maximum), for every answer, on each metric.
pub(super) fn needs(demand: &Demand, settings: &Settings, prompt: u64, prices: &Prices) -> Needs {
    let out_need = settings.min_output_tokens.min(demand.max_output_tokens);
    let out = out_need.saturating_mul(demand.answers.max(1));
    let mut needs = [0; 7];
    for metric in Metric::ALL {
        needs[metric as usize] = match metric {
            Metric::InputTokens => prompt,
            Metric::OutputTokens => out,
            Metric::Cost => Holds::new(prompt, out_need, demand.answers, prices).cost,
            Metric::Tokens => prompt.saturating_add(out),
            Metric::Requests | Metric::Concurrency => 1,
            Metric::ComputeMs => 0,
        };
    }
    needs
}

/// The snapshot one decision reads: the path, its counters, the instant and what the call
/// needs.
pub(super) struct Snapshot<'a> {
    pub(super) path: &'a Path,
    pub(super) reads: &'a [SlotRead],
    pub(super) now: Millis,
    pub(super) needs: Needs,
}

impl Snapshot<'_> {
    /// The refusal of the ceiling that frees up last, when any ceiling has nothing left.
    pub(super) fn exhausted_ceiling(&self) -> Option<Refusal> {
        let (rule, state) = latest_exhausted(self.path.ceilings.iter(), self.reads, self.now)?;
        Some(self.reached(rule, &state))
    }

    /// The first source with room (`None`: no source has a limit, bill the default). A team
    /// with nothing left passes the call on; a direct or public source with nothing left
    /// refuses, and so does a path whose every source is a team with nothing left.
    pub(super) fn pick_source(&self) -> Result<Option<usize>, Refusal> {
        let mut team_refusal = None;
        for (i, source) in self.path.sources.iter().enumerate() {
            let Some((rule, state)) = latest_exhausted(source.rules.iter(), self.reads, self.now)
            else {
                return Ok(Some(i));
            };
            let refusal = self.reached(rule, &state);
            if source.source.kind != SourceKind::Team {
                return Err(refusal);
            }
            team_refusal.get_or_insert(refusal);
        }
        team_refusal.map_or(Ok(None), Err)
    }

    /// A rule with nothing left: refused as held by calls in progress when their holds, not
    /// use, leave no room.
    fn reached(&self, rule: &PathRule, state: &RuleState) -> Refusal {
        self.held_refusal(rule, state)
            .unwrap_or_else(|| reached(self.path, rule, state, self.now))
    }

    /// The refusal of a rule whose room the holds of calls in progress take, not use
    /// (`caused_by_holds`): it says so and is retryable.
    fn held_refusal(&self, rule: &PathRule, state: &RuleState) -> Option<Refusal> {
        let need = self.needs[rule.rule.metric as usize];
        caused_by_holds(rule, state, need).then(|| held_by_calls(self.path, rule, state, self.now))
    }

    /// The refusal for the rule that sets what is left of `metric`: with when what the call
    /// needs is free, or that it never will be.
    fn not_fit(&self, least: &Least, metric: Metric) -> Refusal {
        let (left, rule) = least[metric as usize].expect("a rule of that metric");
        let state = rule_state(rule, self.reads, self.now);
        if let Some(refusal) = self.held_refusal(rule, &state) {
            return refusal;
        }
        let need = self.needs[metric as usize];
        let resets_at = room_at(rule, self.reads, need, self.now);
        does_not_fit(self.path, rule, left, need, resets_at, self.now)
    }

    /// The output maximum per answer that fits what is left of every metric (each answer
    /// may write it), or the refusal for the first metric the prompt does not fit in, or
    /// that leaves too little output. A call without an output maximum holds at most what
    /// `settings.uncapped_output` allows of what is left.
    pub(super) fn output_room(
        &self,
        least: &Least,
        demand: &Demand,
        settings: &Settings,
        prompt: u64,
        prices: &Prices,
    ) -> Result<u64, Refusal> {
        let out_need = settings.min_output_tokens.min(demand.max_output_tokens);
        let answers = demand.answers.max(1);
        let mut max_out = demand.max_output_tokens;
        let mut bound_by: Option<Metric> = None;
        let mut least_room: Option<u64> = None;
        let mut lower = |max_out: &mut u64, room: u64, metric: Metric| {
            let room = room / answers;
            least_room = Some(least_room.map_or(room, |l| l.min(room)));
            if room < *max_out {
                *max_out = room;
                bound_by = Some(metric);
            }
        };
        if let Some(l) = left_of(least, Metric::InputTokens) {
            if prompt > l {
                return Err(self.not_fit(least, Metric::InputTokens));
            }
        }
        if let Some(l) = left_of(least, Metric::OutputTokens) {
            lower(&mut max_out, l, Metric::OutputTokens);
        }
        if let Some(l) = left_of(least, Metric::Tokens) {
            if prompt > l {
                return Err(self.not_fit(least, Metric::Tokens));
            }
            lower(&mut max_out, l - prompt, Metric::Tokens);
        }
        if let Some(l) = left_of(least, Metric::Cost) {
            let prompt_cost = prices.dearest_cost_micros(prompt, 0);
            if prompt_cost > l {
                return Err(self.not_fit(least, Metric::Cost));
            }
            if let Some(room) = cost_output_room(l, prompt_cost, prices) {
                lower(&mut max_out, room, Metric::Cost);
            }
        }
        if let Some(metric) = bound_by {
            if max_out < out_need {
                return Err(self.not_fit(least, metric));
            }
        }
        if let (true, Some(room)) = (demand.uncapped, least_room) {
            // Never below what the call needs to run: the share limits, it never refuses.
            max_out = max_out.min(settings.uncapped_output.of_room(room).max(out_need));
        }
        Ok(max_out)
    }

    /// One item per counter the call adds to, each with its hold and the tightest rule
    /// checked on it (a zero hold on a counter without a limit is left out), and the slot of
    /// each item.
    pub(super) fn reserve_items(
        &self,
        billed: Option<usize>,
        added_slots: &[usize],
        holds: &Holds,
    ) -> (Vec<ReserveItem>, Vec<usize>) {
        let path = self.path;
        let mut limits: Vec<Option<u64>> = vec![None; path.counters.len()];
        for rule in path.checked_rules(billed) {
            let limit = &mut limits[rule.slot];
            *limit = Some(limit.map_or(rule.rule.amount, |l| l.min(rule.rule.amount)));
        }
        let mut items = Vec::with_capacity(added_slots.len());
        let mut item_slots = Vec::with_capacity(added_slots.len());
        for &slot in added_slots {
            let id = &path.counters[slot];
            let hold = holds.of(id.metric);
            let limit = limits[slot];
            if hold == 0 && limit.is_none() {
                continue;
            }
            let bucket = id.window.bucket_start(self.now);
            items.push(ReserveItem {
                key: CounterKey {
                    id: id.clone(),
                    bucket,
                },
                hold,
                limit,
                carried: self.reads[slot].carried(id.window, self.now),
                retain_until: id.window.retain_until(bucket),
            });
            item_slots.push(slot);
        }
        (items, item_slots)
    }
}

/// The usage ceiling of an admitted call: its holds, capped by what is left.
pub(super) fn usage_ceiling(
    least: &Least,
    holds: &Holds,
    prices: Prices,
    settings: &Settings,
) -> UsageCeiling {
    let cost_left = left_of(least, Metric::Cost);
    UsageCeiling {
        tokens: left_of(least, Metric::Tokens).map(|l| holds.tokens.min(l)),
        cost_micros: cost_left.map(|l| holds.cost.min(l)),
        rates: cost_left.map(|_| prices),
        max_output_tokens: holds.max_out,
        min_output_tokens: settings.min_output_tokens,
        margin: settings.margin,
    }
}
