//! A reservation over slot groups (`groups.rs`): each group's script sent together, groups
//! whose copy of the epoch is behind brought up to the guard's generation, and the holds
//! placed given back when any group refuses.

use futures::future::join_all;
use redis::RedisResult;

use super::args::Args;
use super::connection::Conn;
use super::group_join::horizon_need;
use super::groups::protocol_error;
use super::keys::write_ticket_key;
use super::scripts::{invoke, Lua, Scripts};
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{Fence, KnownOutcome, ReserveItem, ReserveOutcome, StoreFuture};

/// One group's share of a reservation (plain, from known values, or carrying settles): its
/// script, keys and arguments, where the script's code is in its answer, and the keys and
/// arguments of its give-back (`unreserve.lua`).
pub(super) struct GroupCall {
    pub(super) tag: String,
    /// The original indices of the group's items.
    pub(super) members: Vec<usize>,
    /// Until when the group's entry in the list of groups must last at least
    /// (`horizon_need`).
    pub(super) need: Millis,
    pub(super) script: fn(&Scripts) -> &Lua,
    pub(super) keys: Args,
    pub(super) args: Args,
    /// The answer's values before the code (a carry script's settle outcomes).
    pub(super) code_at: usize,
    back_keys: Args,
    back_args: Args,
}

/// A group's answer: the script's integers. Its code (at `code_at`) is -1 reserved, -5
/// settled, -6 moved (known values), a fence code (-2, -3, -4, -7), or the index (in the
/// group) of the first item that did not fit.
pub(super) type Answer = RedisResult<Vec<i64>>;

/// The code of answer `a` of `call` (-1 when it has none: never sent).
fn code_of(call: &GroupCall, a: &Answer) -> Option<i64> {
    a.as_ref().ok().and_then(|v| v.get(call.code_at).copied())
}

/// A script's answer as integers: one integer, or an array of them.
fn integers(value: redis::Value) -> RedisResult<Vec<i64>> {
    match value {
        redis::Value::Int(n) => Ok(vec![n]),
        other => Ok(redis::from_redis_value(other)?),
    }
}

impl RedisStore {
    /// `reserve` over slot groups (see the module): each group all-or-none, the others' holds
    /// given back when one refuses.
    pub(super) fn reserve_grouped(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        minute: i64,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'static, ReserveOutcome> {
        let split = self.split(items.iter().map(|i| &*i.key.id));
        let calls: Vec<GroupCall> = split
            .into_iter()
            .map(|(tag, members)| {
                self.group_reserve(tag, members, &ticket, &items, minute, now, &fence)
            })
            .collect();
        let store = self.clone();
        self.run("reserve", move |_, conn| async move {
            let answers = store.attempt(&conn, &calls, &fence.generation, now).await;
            let placed = placed(&calls, &answers);
            let outcome = outcome_of(&calls, answers);
            if !matches!(outcome, Ok(ReserveOutcome::Reserved)) {
                store.give_back(&conn, &calls, &placed).await?;
            }
            outcome
        })
    }

    /// One group's share of a reservation (`GroupReserve`).
    #[allow(clippy::too_many_arguments)]
    fn group_reserve(
        &self,
        tag: String,
        members: Vec<usize>,
        ticket: &str,
        items: &[ReserveItem],
        minute: i64,
        now: Millis,
        fence: &Fence,
    ) -> GroupCall {
        let sub: Vec<ReserveItem> = members.iter().map(|&i| items[i].clone()).collect();
        let mut call = self.group_call(tag, members, ticket, minute, now, &sub);
        let sub_fence = sub_fence(fence, &call.members, call.need);
        (call.keys, call.args) = self.reserve_call(&call.tag, ticket, &sub, minute, now, sub_fence);
        call
    }

    /// A group's call with its give-back for `items` (the script, keys and arguments: a plain
    /// reserve's with none, for the caller to set).
    pub(super) fn group_call(
        &self,
        tag: String,
        members: Vec<usize>,
        ticket: &str,
        minute: i64,
        now: Millis,
        items: &[ReserveItem],
    ) -> GroupCall {
        let mut back_keys = Args::with_capacity(1 + items.len(), 96 * (1 + items.len()));
        back_keys.push_with(|out| write_ticket_key(&tag, ticket, out));
        let mut back_args = Args::with_capacity(2 + items.len(), 12 * (2 + items.len()));
        back_args.push_num(now);
        back_args.push_num(minute);
        for item in items {
            back_keys.push_with(|out| self.write_holds_key(&item.key, out));
            back_args.push_num(item.hold);
        }
        GroupCall {
            tag,
            members,
            need: horizon_need(items, now),
            script: |s| &s.reserve,
            keys: Args::default(),
            args: Args::default(),
            code_at: 0,
            back_keys,
            back_args,
        }
    }

    /// Sends every group's call, brings groups whose copy of the epoch is behind up to the
    /// guard's `generation` (or lasts too short: `group_join.rs`) and sends theirs again
    /// (once; a carry's settles answer settled if either sending settled them), unless a
    /// group refused. Answers per group.
    pub(super) async fn attempt(
        &self,
        conn: &Conn,
        calls: &[GroupCall],
        generation: &str,
        now: Millis,
    ) -> Vec<Answer> {
        let all: Vec<usize> = (0..calls.len()).collect();
        let mut answers = self.send(conn, calls, &all).await;
        if !generation.is_empty() {
            self.bring_up(conn, calls, generation, now, &mut answers)
                .await;
        }
        answers
    }

    /// The second step of `attempt`: brings up the groups that answered -2, -3 or -8 (unless
    /// a group refused) and sends theirs again, the answers replacing theirs.
    async fn bring_up(
        &self,
        conn: &Conn,
        calls: &[GroupCall],
        generation: &str,
        now: Millis,
        answers: &mut [Answer],
    ) {
        let codes: Vec<Option<i64>> = calls
            .iter()
            .zip(answers.iter())
            .map(|(c, a)| code_of(c, a))
            .collect();
        let behind: Vec<usize> = (0..calls.len())
            .filter(|&g| matches!(codes[g], Some(-2) | Some(-3) | Some(-8)))
            .collect();
        let refused = codes
            .iter()
            .any(|c| matches!(c, Some(c) if *c >= 0 || *c == -5 || *c == -6));
        if behind.is_empty() || refused {
            return;
        }
        let mut joined = Vec::new();
        for &g in &behind {
            let (tag, need) = (&calls[g].tag, calls[g].need);
            let brought = match codes[g].unwrap_or(-2) {
                -8 => self.renew_group(conn, tag, generation, need, now).await,
                code => {
                    self.join_group(conn, tag, generation, code, need, now)
                        .await
                }
            };
            match brought {
                Ok(None) => joined.push(g),
                Ok(Some(fenced)) => {
                    if let Ok(values) = &mut answers[g] {
                        values.truncate(calls[g].code_at);
                        values.push(fenced);
                    }
                }
                Err(e) => answers[g] = Err(e),
            }
        }
        let again = self.send(conn, calls, &joined).await;
        for (g, answer) in joined.into_iter().zip(again) {
            let first = std::mem::replace(&mut answers[g], answer);
            if let (Ok(first), Ok(now)) = (first, &mut answers[g]) {
                for (a, b) in now.iter_mut().zip(first).take(calls[g].code_at) {
                    *a = (*a).min(b);
                }
            }
        }
    }

    /// The calls of the groups `which`, sent together; answers in that order.
    pub(super) async fn send(
        &self,
        conn: &Conn,
        calls: &[GroupCall],
        which: &[usize],
    ) -> Vec<Answer> {
        let sent = which.iter().map(|&g| {
            let mut conn = conn.clone();
            let call = &calls[g];
            let script = (call.script)(&self.inner.scripts);
            async move {
                let value: redis::Value = invoke(script, &call.keys, &call.args, &mut conn).await?;
                integers(value)
            }
        });
        join_all(sent).await
    }

    /// Gives back the holds the groups `which` placed (`unreserve.lua`), all together.
    pub(super) async fn give_back(
        &self,
        conn: &Conn,
        calls: &[GroupCall],
        which: &[usize],
    ) -> RedisResult<()> {
        let script = &self.inner.scripts.unreserve;
        let sent =
            which.iter().map(|&g| {
                let mut conn = conn.clone();
                let call = &calls[g];
                async move {
                    invoke::<i64, _>(script, &call.back_keys, &call.back_args, &mut conn).await
                }
            });
        for answer in join_all(sent).await {
            answer?;
        }
        Ok(())
    }
}

/// The groups whose reservation is placed (answered -1).
pub(super) fn placed(calls: &[GroupCall], answers: &[Answer]) -> Vec<usize> {
    (0..calls.len())
        .filter(|&g| code_of(&calls[g], &answers[g]) == Some(-1))
        .collect()
}

/// `fence` for the items `members` of a group whose entry must last until `need`: the
/// generation goes as `<generation>@<need>` (fence.lua answers -8 while the group's copy of
/// the epoch lasts less).
pub(super) fn sub_fence(fence: &Fence, members: &[usize], need: Millis) -> Fence {
    let fenced = members
        .iter()
        .map(|&i| fence.fenced.get(i).copied().unwrap_or(false));
    let generation = match fence.generation.is_empty() {
        true => String::new(),
        false => format!("{}@{need}", fence.generation),
    };
    Fence {
        generation,
        fenced: fenced.collect(),
    }
}

/// The reserve's answer from every group's code: an error if any group failed; else a
/// conflict (on the first item, in the caller's order, that did not fit), settled, or a
/// fence's answer, if any group answered one; else reserved.
fn outcome_of(calls: &[GroupCall], answers: Vec<Answer>) -> RedisResult<ReserveOutcome> {
    let mut codes = Vec::with_capacity(answers.len());
    for (call, answer) in calls.iter().zip(answers) {
        let answer = answer?;
        let code = answer.get(call.code_at).copied();
        codes.push(code.ok_or_else(|| protocol_error("reserve", "an empty answer".into()))?);
    }
    match outcome_of_codes(calls, &codes)? {
        KnownOutcome::Reserve(outcome) => Ok(outcome),
        KnownOutcome::Moved => Err(protocol_error("reserve", "a code -6".into())),
    }
}

/// The outcome from every group's code (as `outcome_of`; -6, moved, only when no group
/// answered anything else but reserved).
pub(super) fn outcome_of_codes(calls: &[GroupCall], codes: &[i64]) -> RedisResult<KnownOutcome> {
    let mut conflict: Option<usize> = None;
    let (mut settled, mut fenced, mut moved) = (false, None, false);
    for (call, &code) in calls.iter().zip(codes) {
        match code {
            -1 => {}
            -5 => settled = true,
            c if c >= 0 => {
                let item = call.members.get(c as usize).copied();
                let item = item.ok_or_else(|| protocol_error("reserve", format!("item {c}")))?;
                conflict = Some(conflict.map_or(item, |i: usize| i.min(item)));
            }
            -6 => moved = true,
            c => match super::known::fence_answer(c) {
                Some(answer) => fenced = fenced.or(Some(answer)),
                None => return Err(protocol_error("reserve", format!("an unknown code {c}"))),
            },
        }
    }
    let reserve = KnownOutcome::Reserve;
    Ok(match (conflict, settled, fenced, moved) {
        (Some(item), ..) => reserve(ReserveOutcome::Conflict { item }),
        (None, true, ..) => reserve(ReserveOutcome::Settled),
        (None, false, Some(answer), _) => reserve(ReserveOutcome::Fenced(answer)),
        (None, false, None, true) => KnownOutcome::Moved,
        (None, false, None, false) => reserve(ReserveOutcome::Reserved),
    })
}
