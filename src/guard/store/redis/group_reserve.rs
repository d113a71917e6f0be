//! A reservation over slot groups (`groups.rs`): each group's script sent together, groups
//! whose copy of the epoch is behind brought up to the guard's generation, and the holds
//! placed given back when any group refuses.

use futures::future::join_all;
use redis::RedisResult;

use super::args::Args;
use super::connection::Conn;
use super::groups::{groups_key, protocol_error};
use super::keys::{write_epoch_key, write_ticket_key};
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{Fence, ReserveItem, ReserveOutcome, StoreFuture};

/// One group's share of a reservation: its script's keys and arguments, and those of its
/// give-back.
struct GroupReserve {
    tag: String,
    members: Vec<usize>,
    keys: Args,
    args: Args,
    back_keys: Args,
    back_args: Args,
}

/// A group's answer to a reserve, as the script's code: -1 reserved, -5 settled, a fence
/// code (-2, -3, -4, -7), or the index (in the group) of the first item that did not fit.
type Code = RedisResult<i64>;

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
        let calls: Vec<GroupReserve> = split
            .into_iter()
            .map(|(tag, members)| {
                self.group_reserve(tag, members, &ticket, &items, minute, now, &fence)
            })
            .collect();
        let store = self.clone();
        self.run("reserve", move |_, conn| async move {
            store.place(&conn, &calls, &fence.generation, now).await
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
    ) -> GroupReserve {
        let sub: Vec<ReserveItem> = members.iter().map(|&i| items[i].clone()).collect();
        let fenced = members
            .iter()
            .map(|&i| fence.fenced.get(i).copied().unwrap_or(false));
        let sub_fence = Fence {
            generation: fence.generation.clone(),
            fenced: fenced.collect(),
        };
        let (keys, args) = self.reserve_call(&tag, ticket, &sub, minute, now, sub_fence);
        let mut back_keys = Args::with_capacity(1 + sub.len(), 96 * (1 + sub.len()));
        back_keys.push_with(|out| write_ticket_key(&tag, ticket, out));
        let mut back_args = Args::with_capacity(2 + sub.len(), 12 * (2 + sub.len()));
        back_args.push_num(now);
        back_args.push_num(minute);
        for item in &sub {
            back_keys.push_with(|out| self.write_holds_key(&item.key, out));
            back_args.push_num(item.hold);
        }
        GroupReserve {
            tag,
            members,
            keys,
            args,
            back_keys,
            back_args,
        }
    }

    /// Sends every group's reservation, brings groups whose copy of the epoch is behind up to
    /// the guard's `generation` and sends theirs again (once), then answers: reserved when
    /// every group reserved, else the refusal (after the holds placed are given back).
    async fn place(
        &self,
        conn: &Conn,
        calls: &[GroupReserve],
        generation: &str,
        now: Millis,
    ) -> RedisResult<ReserveOutcome> {
        let all: Vec<usize> = (0..calls.len()).collect();
        let mut codes = self.send_reserves(conn, calls, &all).await;
        let behind: Vec<usize> = (0..calls.len())
            .filter(|&g| matches!(codes[g], Ok(-2) | Ok(-3)))
            .collect();
        let refused = codes
            .iter()
            .any(|c| matches!(c, Ok(c) if *c >= 0 || *c == -5));
        if self.grouped() && !generation.is_empty() && !behind.is_empty() && !refused {
            let mut joined = Vec::new();
            for &g in &behind {
                let code = *codes[g].as_ref().unwrap_or(&-2);
                match self
                    .join_group(conn, &calls[g].tag, generation, code, now)
                    .await
                {
                    Ok(None) => joined.push(g),
                    Ok(Some(fenced)) => codes[g] = Ok(fenced),
                    Err(e) => codes[g] = Err(e),
                }
            }
            let again = self.send_reserves(conn, calls, &joined).await;
            for (g, code) in joined.into_iter().zip(again) {
                codes[g] = code;
            }
        }
        let placed: Vec<usize> = (0..calls.len())
            .filter(|&g| matches!(codes[g], Ok(-1)))
            .collect();
        let outcome = outcome_of(calls, codes);
        if !matches!(outcome, Ok(ReserveOutcome::Reserved)) {
            self.give_back(conn, calls, &placed).await?;
        }
        outcome
    }

    /// The reservations of the groups `which`, sent together; answers in that order.
    async fn send_reserves(
        &self,
        conn: &Conn,
        calls: &[GroupReserve],
        which: &[usize],
    ) -> Vec<Code> {
        let script = &self.inner.scripts.reserve;
        let sent = which.iter().map(|&g| {
            let mut conn = conn.clone();
            let call = &calls[g];
            async move { invoke::<i64, _>(script, &call.keys, &call.args, &mut conn).await }
        });
        join_all(sent).await
    }

    /// Gives back the holds the groups `which` placed (`unreserve.lua`), all together.
    async fn give_back(
        &self,
        conn: &Conn,
        calls: &[GroupReserve],
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
    async fn join_group(
        &self,
        conn: &Conn,
        tag: &str,
        generation: &str,
        code: i64,
        now: Millis,
    ) -> RedisResult<Option<i64>> {
        let (mut a, mut b) = (conn.clone(), conn.clone());
        let keys = Args::of([&self.inner.epoch_key, &groups_key(&self.inner.home)]);
        let mut args = Args::of(["join", tag, generation]);
        args.push_num(code);
        let answer: Vec<String> = invoke(&self.inner.scripts.groups, &keys, &args, &mut a).await?;
        let hold_again_until = match answer.first().map(String::as_str) {
            Some("join") => answer.get(1).cloned().unwrap_or_else(|| "0".into()),
            Some("lost") => return Ok(Some(-2)),
            Some("stale") => return Ok(Some(-3)),
            other => return Err(protocol_error("groups", format!("an answer {other:?}"))),
        };
        // The group's copy, written as the store's epoch is (`epoch.lua`, forced: no lock).
        let mut keys = Args::default();
        keys.push_with(|out| write_epoch_key(tag, out));
        keys.push_with(|out| {
            write_epoch_key(tag, out);
            out.push_str(":lock");
        });
        let mut args = Args::of(["write", generation]);
        args.push_num(now);
        for arg in ["", "force", ""] {
            args.push(arg);
        }
        args.push(&hold_again_until);
        let written: String = invoke(&self.inner.scripts.epoch, &keys, &args, &mut b).await?;
        match written.as_str() {
            "ok" => Ok(None),
            other => Err(protocol_error(
                "groups",
                format!("a copy answered {other:?}"),
            )),
        }
    }
}

/// The reserve's answer from every group's code: an error if any group failed; else a
/// conflict (on the first item, in the caller's order, that did not fit), settled, or a
/// fence's answer, if any group answered one; else reserved.
fn outcome_of(calls: &[GroupReserve], codes: Vec<Code>) -> RedisResult<ReserveOutcome> {
    let mut conflict: Option<usize> = None;
    let (mut settled, mut fenced) = (false, None);
    for (call, code) in calls.iter().zip(codes) {
        match code? {
            -1 => {}
            -5 => settled = true,
            c if c >= 0 => {
                let item = call.members.get(c as usize).copied();
                let item = item.ok_or_else(|| protocol_error("reserve", format!("item {c}")))?;
                conflict = Some(conflict.map_or(item, |i: usize| i.min(item)));
            }
            c => match super::known::fence_answer(c) {
                Some(answer) => fenced = fenced.or(Some(answer)),
                None => return Err(protocol_error("reserve", format!("an unknown code {c}"))),
            },
        }
    }
    Ok(match (conflict, settled, fenced) {
        (Some(item), _, _) => ReserveOutcome::Conflict { item },
        (None, true, _) => ReserveOutcome::Settled,
        (None, false, Some(answer)) => ReserveOutcome::Fenced(answer),
        (None, false, None) => ReserveOutcome::Reserved,
    })
}
