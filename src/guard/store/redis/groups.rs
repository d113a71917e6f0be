//! Slot groups (docs/redis.md, "Slot groups"): each owner's counters (a person's, a team's, a
//! model's, a generic rule subject's: `CounterId::write_owner`) under a hash tag of their own,
//! `{<prefix>:2:<owner>}`, so one store's load spreads over a cluster's masters. An operation
//! runs one script per group it touches, all sent together (the connection multiplexes them to
//! their masters: one round of round trips):
//!
//! - a read reads each group's counters and answers them in the caller's order;
//! - a reserve reserves each group all-or-none under the group's own record of the ticket;
//!   when any group refuses, the holds the others placed are given back by ticket id
//!   (`unreserve.lua`) before the answer, so the ticket may reserve again; a give-back that
//!   fails answers an error (the caller then releases the ticket; its holds expire by the
//!   minute at worst: counted high, never low);
//! - a settle gives back and adds each group's part once per id per group.
//!
//! The epoch fence runs per group against the group's copy of the store's epoch,
//! `<group tag>:epoch` (the same fence.lua as the shared layout's): its own generation, the
//! `run_id` of the master that wrote it and its registries. The store's epoch (`<store tag>:epoch`) stays the one
//! the guards trust and recover. A group whose copy is missing or of another process (`-2`)
//! or of another generation (`-3`) asks the store's list of groups (`<store tag>:groups`,
//! group tag → the generation it was listed under, `groups.lua`): listed under the guard's
//! generation (or marked held by the recovery that wrote it: `group_sweep.rs`) means its
//! master lost it (a restart, a failover) and the reserve answers `Untrusted`, so the guard
//! recovers (unless the copy, read again, shows another guard joined the group since the
//! reserve looked); else (a group new since, or written before a
//! recovery) it is given a copy of the store's epoch (with its `w`), then listed under the
//! guard's generation, and reserves again (`group_join.rs`, which also keeps the entry and
//! the copy only as long as the group's calls need them). A master's loss thus fences the
//! calls that touch its groups; other groups keep answering until the recovery writes a new
//! generation.

use futures::future::join_all;
use redis::RedisError;

use super::args::Args;
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::rule::CounterId;
use crate::guard::store::{
    CounterKey, CounterRead, HoldRef, PartsSettle, Settle, SettleOutcome, StoreFuture, UsageAdd,
};

/// The key of a store's list of groups (`<store tag>:groups`).
pub(super) fn groups_key(home: &str) -> String {
    format!("{home}:groups")
}

/// Things split by group: per group its tag and the indices of its members, in the order the
/// groups were first met.
type Split = Vec<(String, Vec<usize>)>;

pub(super) fn protocol_error(what: &'static str, why: String) -> RedisError {
    RedisError::from((redis::ErrorKind::UnexpectedReturnType, what, why))
}

impl RedisStore {
    /// Whether this store places each owner's counters in a slot group of their own.
    pub(super) fn grouped(&self) -> bool {
        self.inner.group_head.is_some()
    }

    /// `ids` split by the tag of their keys (one group in the shared layout).
    pub(super) fn split<'a>(&self, ids: impl Iterator<Item = &'a CounterId>) -> Split {
        let mut groups: Split = Vec::new();
        let mut tag = String::with_capacity(48);
        for (i, id) in ids.enumerate() {
            tag.clear();
            self.write_tag(id, &mut tag);
            match groups.iter_mut().find(|(t, _)| *t == tag) {
                Some((_, members)) => members.push(i),
                None => groups.push((tag.clone(), vec![i])),
            }
        }
        groups
    }

    /// `read` over slot groups: one read script per group, answered in `keys`' order.
    pub(super) fn read_grouped(
        &self,
        keys: Vec<CounterKey>,
        now: Millis,
    ) -> StoreFuture<'static, Vec<CounterRead>> {
        let calls: Vec<(Vec<usize>, Args)> = self
            .split(keys.iter().map(|k| &*k.id))
            .into_iter()
            .map(|(_, members)| {
                let mut redis_keys = Args::with_capacity(2 * members.len(), 192 * members.len());
                for &i in &members {
                    redis_keys.push_with(|out| self.write_redis_key(&keys[i], out));
                    redis_keys.push_with(|out| self.write_holds_key(&keys[i], out));
                }
                (members, redis_keys)
            })
            .collect();
        let count = keys.len();
        self.run("read", move |inner, conn| async move {
            let mut args = Args::default();
            args.push_num(now);
            let sent = calls.iter().map(|(_, redis_keys)| {
                let (mut conn, args) = (conn.clone(), &args);
                let script = &inner.scripts.read;
                async move { invoke::<Vec<u64>, _>(script, redis_keys, args, &mut conn).await }
            });
            let answers = join_all(sent).await;
            let mut out = vec![CounterRead::default(); count];
            for ((members, _), flat) in calls.iter().zip(answers) {
                let flat = flat?;
                if flat.len() != 2 * members.len() {
                    let why = format!("{} values for {} counters", flat.len(), members.len());
                    return Err(protocol_error("read", why));
                }
                for (pair, &i) in flat.chunks_exact(2).zip(members) {
                    out[i] = CounterRead {
                        used: pair[0],
                        held: pair[1],
                    };
                }
            }
            Ok(out)
        })
    }

    /// `settle` over slot groups: each group's holds and adds once per id per group; settled
    /// when any group settled now, else already settled.
    pub(super) fn settle_grouped(
        &self,
        settle: &Settle,
        now: Millis,
    ) -> StoreFuture<'static, SettleOutcome> {
        let calls = self.settle_groups(settle, now);
        if calls.is_empty() {
            return StoreFuture::ready(Ok(SettleOutcome::Settled));
        }
        self.run("settle", move |inner, conn| async move {
            let script = &inner.scripts.settle;
            let sent = calls.iter().map(|(_, keys, args)| {
                let mut conn = conn.clone();
                async move { invoke::<i64, _>(script, keys, args, &mut conn).await }
            });
            let mut outcome = SettleOutcome::AlreadySettled;
            for answer in join_all(sent).await {
                if answer? == 0 {
                    outcome = SettleOutcome::Settled;
                }
            }
            Ok(outcome)
        })
    }

    /// Each group's tag and `settle.lua` call for `settle` (none when nothing is to be done).
    pub(super) fn settle_groups(&self, settle: &Settle, now: Millis) -> Vec<(String, Args, Args)> {
        let ids = settle.holds.iter().map(|h| &*h.key.id);
        let split = self.split(ids.chain(settle.adds.iter().map(|a| &*a.key.id)));
        let holds = settle.holds.len();
        let part = |members: &[usize]| Settle {
            holds: pick(
                &settle.holds,
                members.iter().filter(|&&i| i < holds).copied(),
            ),
            adds: pick(
                &settle.adds,
                members.iter().filter(|&&i| i >= holds).map(|i| i - holds),
            ),
            ..shell(settle)
        };
        split
            .into_iter()
            .filter_map(|(tag, members)| {
                let (keys, args) = self.settle_call(&tag, &part(&members), now)?;
                Some((tag, keys, args))
            })
            .collect()
    }

    /// `settle_many` over slot groups: every settle's groups sent together; each settle is
    /// settled when any of its groups settled now.
    pub(super) fn settle_many_grouped(
        &self,
        settles: &[Settle],
        now: Millis,
    ) -> StoreFuture<'static, Vec<Result<SettleOutcome, crate::guard::store::StoreError>>> {
        let calls: Vec<Vec<(String, Args, Args)>> =
            settles.iter().map(|s| self.settle_groups(s, now)).collect();
        self.run("settle", move |inner, conn| async move {
            let script = &inner.scripts.settle;
            let sent = calls.iter().map(|groups| {
                let conn = conn.clone();
                async move {
                    let each = groups.iter().map(|(_, keys, args)| {
                        let mut conn = conn.clone();
                        async move { invoke::<i64, _>(script, keys, args, &mut conn).await }
                    });
                    let mut outcome = Ok(if groups.is_empty() {
                        SettleOutcome::Settled
                    } else {
                        SettleOutcome::AlreadySettled
                    });
                    for answer in join_all(each).await {
                        match answer {
                            Ok(0) => {
                                if outcome.is_ok() {
                                    outcome = Ok(SettleOutcome::Settled);
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                outcome = Err(crate::guard::store::StoreError(format!(
                                    "redis settle: {e}"
                                )))
                            }
                        }
                    }
                    outcome
                }
            });
            Ok(join_all(sent).await)
        })
    }

    /// `settle_parts` over slot groups: every part in each group its holds or adds touch
    /// (each group keeps its own record of each part); per part, settled when any group
    /// settled it now.
    pub(super) fn parts_groups(&self, settle: &PartsSettle) -> Vec<(String, PartsSettle)> {
        let mut ids: Vec<&CounterId> = Vec::new();
        for part in &settle.parts {
            ids.extend(part.holds.iter().map(|h| &*h.key.id));
            ids.extend(part.adds.iter().map(|a| &*a.key.id));
        }
        let mut tags: Vec<String> = self
            .split(ids.into_iter())
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        if tags.is_empty() {
            tags.push(self.inner.home.clone());
        }
        tags.into_iter()
            .map(|tag| {
                let in_group = |id: &CounterId| self.tag_of(id) == tag;
                let mut sub = settle.clone();
                for part in &mut sub.parts {
                    part.holds.retain(|h: &HoldRef| in_group(&h.key.id));
                    part.adds.retain(|a: &UsageAdd| in_group(&a.key.id));
                }
                (tag, sub)
            })
            .collect()
    }
}

/// `settle` with no holds and no adds.
fn shell(settle: &Settle) -> Settle {
    Settle {
        id: settle.id.clone(),
        ticket: settle.ticket.clone(),
        holds: Vec::new(),
        expiry_minute: settle.expiry_minute,
        adds: Vec::new(),
        settled_until: settle.settled_until,
    }
}

/// The items of `all` at `indices`.
fn pick<T: Clone>(all: &[T], indices: impl Iterator<Item = usize>) -> Vec<T> {
    indices.map(|i| all[i].clone()).collect()
}
