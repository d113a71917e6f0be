//! Reservations from known values over slot groups (`groups.rs`): each group checks and places
//! its own items with `reserve_known.lua` (or `carry.lua`, with the queued settles of its
//! group first), all sent together, and answers its counters' fresh values; the answers are
//! merged in the caller's order. What the decision rested on is checked per item in its group
//! (limits, previous buckets); the sources it passed over are checked here, from the fresh
//! values every group answered (their rules may lie in several groups, so not in one step:
//! who pays may be decided on values a moment apart; every limit is still checked
//! atomically where it is placed). Any group that does not reserve, or a passed-over source
//! with room, gives back what the others placed, and the values answered leave it out.

use futures::future::join_all;
use redis::RedisResult;

use super::args::Args;
use super::carry::carry_of;
use super::connection::Conn;
use super::group_reserve::{outcome_of_codes, placed, sub_fence, Answer, GroupCall};
use super::known::parse;
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{
    CounterRead, Fence, KnownAnswer, KnownOutcome, KnownReserve, ReserveOutcome, Settle,
    SettleOutcome, StoreError, StoreFuture,
};

/// Which of the reservation's counters and previous buckets a group answers, in order.
struct Share {
    counters: Vec<usize>,
    previous: Vec<usize>,
}

/// The reservation's answer and one result per settle carried.
type Carried = (KnownAnswer, Vec<Result<SettleOutcome, StoreError>>);

impl RedisStore {
    /// `reserve_known` over slot groups.
    pub(super) fn reserve_known_grouped(
        &self,
        reserve: KnownReserve,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'static, KnownAnswer> {
        let (calls, shares) = self.known_groups(&reserve, now, &fence, &[]);
        let store = self.clone();
        self.run("reserve", move |_, conn| async move {
            let answers = store.attempt(&conn, &calls, &fence.generation, now).await;
            store
                .known_merge(&conn, &reserve, &calls, &shares, answers)
                .await
        })
    }

    /// `reserve_known_carrying` over slot groups: each settle's part in a group the
    /// reservation touches rides in that group's script, before its reservation; its other
    /// parts are sent beside, in the same round. A settle is settled if any part settled now.
    pub(super) fn carry_grouped(
        &self,
        reserve: KnownReserve,
        settles: &[Settle],
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'static, Carried> {
        let parts: Vec<Vec<(String, Args, Args)>> =
            settles.iter().map(|s| self.settle_groups(s, now)).collect();
        let (calls, shares) = self.known_groups(&reserve, now, &fence, &parts);
        let tags: Vec<&str> = calls.iter().map(|c| c.tag.as_str()).collect();
        // (settle index, keys, args) of each part no group carries
        let mut alone: Vec<(usize, Args, Args)> = Vec::new();
        for (s, settle_parts) in parts.iter().enumerate() {
            for (tag, keys, args) in settle_parts {
                if !tags.contains(&tag.as_str()) {
                    alone.push((s, keys.clone(), args.clone()));
                }
            }
        }
        let carried: Vec<Vec<usize>> = calls.iter().map(|c| carried_by(&parts, &c.tag)).collect();
        let count = settles.len();
        let store = self.clone();
        self.run("reserve", move |inner, conn| async move {
            let script = &inner.scripts.settle;
            let beside = join_all(alone.iter().map(|(_, keys, args)| {
                let mut conn = conn.clone();
                async move { invoke::<i64, _>(script, keys, args, &mut conn).await }
            }));
            let attempt = store.attempt(&conn, &calls, &fence.generation, now);
            let (beside, answers) = futures::future::join(beside, attempt).await;
            let mut outcomes: Vec<Option<Result<bool, String>>> = vec![None; count];
            let mut note = |s: usize, result: Result<bool, String>| {
                let seen = &mut outcomes[s];
                *seen = Some(match (seen.take(), result) {
                    (Some(Err(e)), _) | (_, Err(e)) => Err(e),
                    (Some(Ok(a)), Ok(b)) => Ok(a || b),
                    (None, Ok(b)) => Ok(b),
                });
            };
            for ((s, _, _), answer) in alone.iter().zip(beside) {
                note(*s, answer.map(|a| a == 0).map_err(|e| e.to_string()));
            }
            for (answer, settled) in answers.iter().zip(&carried) {
                for (j, &s) in settled.iter().enumerate() {
                    let result = match answer {
                        Ok(values) => Ok(values.get(j) == Some(&0)),
                        Err(e) => Err(e.to_string()),
                    };
                    note(s, result);
                }
            }
            let answer = store
                .known_merge(&conn, &reserve, &calls, &shares, answers)
                .await?;
            let settled = outcomes
                .into_iter()
                .map(|o| match o {
                    None | Some(Ok(true)) => Ok(SettleOutcome::Settled),
                    Some(Ok(false)) => Ok(SettleOutcome::AlreadySettled),
                    Some(Err(e)) => Err(StoreError(format!("redis settle: {e}"))),
                })
                .collect();
            Ok((answer, settled))
        })
    }

    /// Each group's share of `reserve` (groups of its counters, in the order first met),
    /// carrying the parts of `settles` in that group when any are given.
    fn known_groups(
        &self,
        reserve: &KnownReserve,
        now: Millis,
        fence: &Fence,
        settles: &[Vec<(String, Args, Args)>],
    ) -> (Vec<GroupCall>, Vec<Share>) {
        let split = self.split(reserve.counters.iter().map(|k| &*k.id));
        split
            .into_iter()
            .map(|(tag, counters)| {
                let (sub, items, previous) = sub_reserve(reserve, &counters);
                let carried: Vec<(Args, Args)> = carried_by(settles, &tag)
                    .into_iter()
                    .flat_map(|s| settles[s].iter().filter(|(t, ..)| *t == tag))
                    .map(|(_, keys, args)| (keys.clone(), args.clone()))
                    .collect();
                let (minute, ticket) = (reserve.expiry_minute, &reserve.ticket);
                let mut call = self.group_call(tag, items, ticket, minute, now, &sub.items);
                let fence = sub_fence(fence, &call.members, call.need);
                let known = self.known_call(&call.tag, &sub, now, fence);
                call.code_at = carried.len();
                (call.keys, call.args) = match carried.is_empty() {
                    true => known,
                    false => carry_of(known, &carried),
                };
                call.script = match carried.is_empty() {
                    true => |s| &s.reserve_known,
                    false => |s| &s.carry,
                };
                (call, Share { counters, previous })
            })
            .unzip()
    }

    /// The outcome and values from every group's answer: the values merged in the caller's
    /// order (none when a group did not look); a reservation whose passed-over sources have
    /// room now is moved; anything but reserved gives back what was placed, and its holds are
    /// taken out of the values answered.
    async fn known_merge(
        &self,
        conn: &Conn,
        reserve: &KnownReserve,
        calls: &[GroupCall],
        shares: &[Share],
        answers: Vec<Answer>,
    ) -> RedisResult<KnownAnswer> {
        let placed = placed(calls, &answers);
        let mut parsed = Vec::with_capacity(calls.len());
        for ((call, share), answer) in calls.iter().zip(shares).zip(answers) {
            let values = answer?;
            let known = &values[call.code_at.min(values.len())..];
            let (n, p) = (share.counters.len(), share.previous.len());
            let known =
                parse(known, n, p).map_err(|why| super::groups::protocol_error("reserve", why))?;
            parsed.push(known);
        }
        let codes: Vec<i64> = parsed.iter().map(|a| code_number(&a.outcome)).collect();
        let mut outcome = outcome_of_codes(calls, &codes)?;
        let mut answer = merged(reserve, shares, &parsed);
        let looked = !answer.counters.is_empty() || reserve.counters.is_empty();
        let reserved = outcome == KnownOutcome::Reserve(ReserveOutcome::Reserved);
        if reserved && looked && skipped_source_has_room(reserve, &answer.counters) {
            outcome = KnownOutcome::Moved;
        }
        if outcome != KnownOutcome::Reserve(ReserveOutcome::Reserved) {
            self.give_back(conn, calls, &placed).await?;
            if looked {
                for &g in &placed {
                    for &i in &calls[g].members {
                        let held = &mut answer.counters[reserve.item_counters[i]].held;
                        *held = held.saturating_sub(reserve.items[i].hold);
                    }
                }
            }
        }
        answer.outcome = outcome;
        Ok(answer)
    }
}

/// The indices of the settles with a part in group `tag`.
fn carried_by(settles: &[Vec<(String, Args, Args)>], tag: &str) -> Vec<usize> {
    (0..settles.len())
        .filter(|&s| settles[s].iter().any(|(t, ..)| t == tag))
        .collect()
}

/// The share of `reserve` on the counters `counters` (indices into `reserve.counters`), with
/// the indices of its items and previous buckets in `reserve`. Passed-over sources are not
/// part of it (checked after, from every group's values).
fn sub_reserve(
    reserve: &KnownReserve,
    counters: &[usize],
) -> (KnownReserve, Vec<usize>, Vec<usize>) {
    let local = |c: usize| counters.iter().position(|&x| x == c);
    let previous: Vec<usize> = (0..reserve.previous.len())
        .filter(|&j| local(reserve.previous[j].1).is_some())
        .collect();
    let items: Vec<usize> = (0..reserve.items.len())
        .filter(|&i| local(reserve.item_counters[i]).is_some())
        .collect();
    let sub = KnownReserve {
        ticket: reserve.ticket.clone(),
        counters: counters
            .iter()
            .map(|&c| reserve.counters[c].clone())
            .collect(),
        previous: previous
            .iter()
            .map(|&j| {
                let (key, c) = &reserve.previous[j];
                (key.clone(), local(*c).unwrap_or(0))
            })
            .collect(),
        items: items.iter().map(|&i| reserve.items[i].clone()).collect(),
        item_counters: items
            .iter()
            .map(|&i| local(reserve.item_counters[i]).unwrap_or(0))
            .collect(),
        item_previous: items
            .iter()
            .map(|&i| {
                reserve.item_previous[i].map(|(j, assumed)| {
                    (previous.iter().position(|&x| x == j).unwrap_or(0), assumed)
                })
            })
            .collect(),
        skipped: Vec::new(),
        expiry_minute: reserve.expiry_minute,
    };
    (sub, items, previous)
}

/// Every group's values in the caller's order; empty when any group did not look.
fn merged(reserve: &KnownReserve, shares: &[Share], parsed: &[KnownAnswer]) -> KnownAnswer {
    let mut answer = KnownAnswer {
        outcome: KnownOutcome::Reserve(ReserveOutcome::Reserved),
        counters: vec![CounterRead::default(); reserve.counters.len()],
        previous: vec![0; reserve.previous.len()],
    };
    for (share, known) in shares.iter().zip(parsed) {
        if known.counters.len() != share.counters.len() {
            answer.counters.clear();
            answer.previous.clear();
            return answer;
        }
        for (read, &c) in known.counters.iter().zip(&share.counters) {
            answer.counters[c] = *read;
        }
        for (used, &j) in known.previous.iter().zip(&share.previous) {
            answer.previous[j] = *used;
        }
    }
    answer
}

/// Whether a source the decision passed over has room in `values` (which hold this
/// reservation's holds, taken out here): every rule of it below its amount.
fn skipped_source_has_room(reserve: &KnownReserve, values: &[CounterRead]) -> bool {
    let mine = |c: usize| -> u64 {
        let on = (0..reserve.items.len()).filter(|&i| reserve.item_counters[i] == c);
        on.map(|i| reserve.items[i].hold).sum()
    };
    reserve.skipped.iter().any(|rules| {
        rules.iter().all(|&(c, amount, carried)| {
            let read = values[c];
            let counted = read.used + read.held.saturating_sub(mine(c)) + carried;
            counted < amount
        })
    })
}

/// A parsed outcome back as its script code.
fn code_number(outcome: &KnownOutcome) -> i64 {
    match outcome {
        KnownOutcome::Moved => -6,
        KnownOutcome::Reserve(ReserveOutcome::Reserved) => -1,
        KnownOutcome::Reserve(ReserveOutcome::Settled) => -5,
        KnownOutcome::Reserve(ReserveOutcome::Conflict { item }) => *item as i64,
        KnownOutcome::Reserve(ReserveOutcome::Fenced(answer)) => super::known::fence_code(*answer),
    }
}
