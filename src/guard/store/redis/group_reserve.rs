//! A reservation over slot groups (`groups.rs`): each group's script sent together, groups
//! whose copy of the epoch is behind brought up to the guard's generation, and the holds
//! placed given back when any group refuses.

use futures::future::join_all;
use redis::RedisResult;

use redis::Script;

use super::args::Args;
use super::connection::Conn;
use super::groups::{groups_key, protocol_error};
use super::keys::{write_epoch_key, write_ticket_key};
use super::scripts::{invoke, Scripts};
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
    pub(super) script: fn(&Scripts) -> &Script,
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
        let sub_fence = sub_fence(fence, &members);
        let (keys, args) = self.reserve_call(&tag, ticket, &sub, minute, now, sub_fence);
        let mut call = self.group_call(tag, members, ticket, minute, now, &sub);
        (call.keys, call.args) = (keys, args);
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
            script: |s| &s.reserve,
            keys: Args::default(),
            args: Args::default(),
            code_at: 0,
            back_keys,
            back_args,
        }
    }

    /// Sends every group's call, brings groups whose copy of the epoch is behind up to the
    /// guard's `generation` and sends theirs again (once; a carry's settles answer settled if
    /// either sending settled them), unless a group refused. Answers per group.
    pub(super) async fn attempt(
        &self,
        conn: &Conn,
        calls: &[GroupCall],
        generation: &str,
        now: Millis,
    ) -> Vec<Answer> {
        let all: Vec<usize> = (0..calls.len()).collect();
        let mut answers = self.send(conn, calls, &all).await;
        let codes: Vec<Option<i64>> = calls
            .iter()
            .zip(&answers)
            .map(|(c, a)| code_of(c, a))
            .collect();
        let behind: Vec<usize> = (0..calls.len())
            .filter(|&g| matches!(codes[g], Some(-2) | Some(-3)))
            .collect();
        let refused = codes
            .iter()
            .any(|c| matches!(c, Some(c) if *c >= 0 || *c == -5 || *c == -6));
        if generation.is_empty() || behind.is_empty() || refused {
            return answers;
        }
        let mut joined = Vec::new();
        for &g in &behind {
            let code = codes[g].unwrap_or(-2);
            match self
                .join_group(conn, &calls[g].tag, generation, code, now)
                .await
            {
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
        answers
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

    /// Brings group `tag`, whose reserve answered `code` (-2 or -3), up to the guard's
    /// `generation` (see the module). `None` when it did (reserve again), else the fence's
    /// code to answer: -3 when the store's epoch is not the guard's, -2 when the group was
    /// listed under it (its master lost it).
    ///
    /// The copy is written before the group is listed, so a group listed under `generation`
    /// had its copy then: a `lost` answer is confirmed by reading the copy again, since the
    /// reserve's look may have come before another guard's join of the same new group (then
    /// the copy is there, of `generation` and this master's process: reserve again).
    pub(super) async fn join_group(
        &self,
        conn: &Conn,
        tag: &str,
        generation: &str,
        code: i64,
        now: Millis,
    ) -> RedisResult<Option<i64>> {
        let list_keys = Args::of([&self.inner.epoch_key, &groups_key(&self.inner.home)]);
        let mut args = Args::of(["check", tag, generation]);
        args.push_num(code);
        let scripts = &self.inner.scripts;
        let answer: Vec<String> =
            invoke(&scripts.groups, &list_keys, &args, &mut conn.clone()).await?;
        let hold_again_until = match answer.first().map(String::as_str) {
            Some("join") => answer.get(1).cloned().unwrap_or_else(|| "0".into()),
            Some("lost") => {
                let (copy, trusted): (String, i64) = invoke(
                    &scripts.epoch,
                    &copy_keys(tag),
                    &Args::of(["read"]),
                    &mut conn.clone(),
                )
                .await?;
                return Ok((copy != generation || trusted != 1).then_some(-2));
            }
            Some("stale") => return Ok(Some(-3)),
            other => return Err(protocol_error("groups", format!("an answer {other:?}"))),
        };
        // The group's copy, written as the store's epoch is (`epoch.lua`, forced: no lock).
        let mut args = Args::of(["write", generation]);
        args.push_num(now);
        for arg in ["", "force", ""] {
            args.push(arg);
        }
        args.push(&hold_again_until);
        let written: String =
            invoke(&scripts.epoch, &copy_keys(tag), &args, &mut conn.clone()).await?;
        if written != "ok" {
            let why = format!("a copy answered {written:?}");
            return Err(protocol_error("groups", why));
        }
        // Listed once the copy is there (not when the store's epoch moved on meanwhile: the
        // copy is then behind, and the next reserve joins again).
        let args = Args::of(["list", tag, generation]);
        let _: i64 = invoke(&scripts.groups, &list_keys, &args, &mut conn.clone()).await?;
        Ok(None)
    }
}

/// The keys of `epoch.lua` on group `tag`'s copy of the epoch: the copy, then its lock.
pub(super) fn copy_keys(tag: &str) -> Args {
    let mut keys = Args::default();
    keys.push_with(|out| write_epoch_key(tag, out));
    keys.push_with(|out| {
        write_epoch_key(tag, out);
        out.push_str(":lock");
    });
    keys
}

/// The groups whose reservation is placed (answered -1).
pub(super) fn placed(calls: &[GroupCall], answers: &[Answer]) -> Vec<usize> {
    (0..calls.len())
        .filter(|&g| code_of(&calls[g], &answers[g]) == Some(-1))
        .collect()
}

/// `fence` for the items `members` of a group.
pub(super) fn sub_fence(fence: &Fence, members: &[usize]) -> Fence {
    let fenced = members
        .iter()
        .map(|&i| fence.fenced.get(i).copied().unwrap_or(false));
    Fence {
        generation: fence.generation.clone(),
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
