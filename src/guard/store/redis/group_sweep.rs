//! What a recovery of a grouped store marks (docs/redis.md, "Slot groups"): the groups whose
//! copy of the epoch was there, and of its master's process, just before the new generation
//! was written. A group joins a new generation lazily (on its first reserve under it), so
//! without a mark a group that lost its copy after the recovery, before it joined, would look
//! like one that lost it before: joined as new, its counters trusted as they are (and, on
//! a guard whose fills are remembered, not filled again). Marked, its missing copy is a loss
//! under the new generation and the one before it (`groups.lua`: listed as
//! `~<new>|<before>`), so the reserve answers `Untrusted` and the guards recover again.
//!
//! The look and the marks come before the write: a group lost after the look is fenced (one
//! recovery more, never a loss trusted). A group whose copy was already missing, or whose
//! master did not answer, is left as it was: its counters are filled again under the new
//! generation when it joins, as before.

use std::time::{Duration, Instant};

use futures::future::join_all;

use super::args::Args;
use super::group_reserve::copy_keys;
use super::groups::groups_key;
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::store::StoreError;

/// The list of groups is read a page at a time (one operation each, within the store's
/// timeout).
const PAGE: usize = 500;

/// When the look and the marks must be done by (from the recovery's start): past the first
/// page of each, a page is begun only when it ends by then even if it takes the store's whole
/// operation timeout (2.5 s by default: pages begin until 2 s and 4 s), so the epoch's write,
/// bounded as any operation, ends within the recovery lock's 10 s (a store given a timeout
/// above 1.8 s still has its first page of each: a page takes milliseconds unless Redis
/// stalls). The groups not looked at or not marked join as before.
const LOOK_BY: Duration = Duration::from_millis(4_500);
const MARK_BY: Duration = Duration::from_millis(6_500);

impl RedisStore {
    /// Whether a page begun now ends by `by` after `started`, even at the operation
    /// timeout (the first page always does).
    fn page_fits(&self, first: bool, started: Instant, by: Duration) -> bool {
        first || started.elapsed() + self.inner.operation_timeout <= by
    }

    /// The groups listed in the store's list whose copy of the epoch is there and of its
    /// master's process now. Stops early (with what it found) when the list cannot be read
    /// or `LOOK_BY` comes near, and says so in the log.
    pub(super) async fn groups_held_now(&self, started: Instant) -> Vec<String> {
        let (mut held, mut looked) = (Vec::new(), 0);
        let mut cursor = 0u64;
        loop {
            if !self.page_fits(cursor == 0, started, LOOK_BY) {
                log::warn!(
                    "counter store: recovery looked at {looked} slot groups' epochs and stopped \
                     (within {LOOK_BY:?}); the groups not looked at join the new epoch as before"
                );
                return held;
            }
            let page = self.held_page(cursor).await;
            let (next, seen, found) = match page {
                Ok(page) => page,
                Err(e) => {
                    log::warn!(
                        "counter store: recovery could not look at every slot group's epoch \
                         ({e}); the groups not looked at join the new epoch as before"
                    );
                    return held;
                }
            };
            held.extend(found);
            looked += seen;
            if next == 0 {
                return held;
            }
            cursor = next;
        }
    }

    /// One page of the list from `cursor`: the next cursor (0 at the end), how many groups
    /// it listed, and those whose copy is there and of its master's process.
    async fn held_page(&self, cursor: u64) -> Result<(u64, usize, Vec<String>), StoreError> {
        let list = groups_key(&self.inner.home);
        self.run("recovery look", move |inner, mut conn| async move {
            let (next, flat): (u64, Vec<String>) = redis::cmd("HSCAN")
                .arg(&list)
                .arg(cursor)
                .arg("COUNT")
                .arg(PAGE)
                .query_async(&mut conn)
                .await?;
            let tags: Vec<String> = flat.into_iter().step_by(2).collect();
            let read = Args::of(["read"]);
            let looks = tags.iter().map(|tag| {
                let (mut conn, read) = (conn.clone(), &read);
                let script = &inner.scripts.epoch;
                async move {
                    let keys = copy_keys(tag);
                    invoke::<(String, i64), _>(script, &keys, read, &mut conn).await
                }
            });
            // A group whose master did not answer is not marked (it joins as before); the
            // others of the page are.
            let mut held = Vec::new();
            for (tag, look) in tags.iter().zip(join_all(looks).await) {
                if let Ok((generation, 1)) = look {
                    if !generation.is_empty() {
                        held.push(tag.clone());
                    }
                }
            }
            Ok((next, tags.len(), held))
        })
        .await
    }

    /// Marks `held` as held at the recovery about to write `generation` (while the recovery
    /// lock is still `token`'s, or without one when `token` is empty), until `MARK_BY`
    /// comes near. A failure is logged: the groups not marked join as before.
    pub(super) async fn mark_held(
        &self,
        generation: &str,
        token: &str,
        held: Vec<String>,
        started: Instant,
    ) {
        for (i, page) in held.chunks(PAGE).enumerate() {
            if !self.page_fits(i == 0, started, MARK_BY) {
                log::warn!(
                    "counter store: recovery stopped marking the slot groups it found held \
                     (within {MARK_BY:?}); those not marked join the new epoch as before"
                );
                return;
            }
            let inner = &self.inner;
            let keys = Args::of([&inner.epoch_key, &groups_key(&inner.home), &inner.lock_key]);
            let mut args = Args::of(["held", generation, token]);
            for tag in page {
                args.push(tag);
            }
            let marked = self
                .run("recovery marks", move |inner, mut conn| async move {
                    invoke::<i64, _>(&inner.scripts.groups, &keys, &args, &mut conn).await
                })
                .await;
            if let Err(e) = marked {
                log::warn!(
                    "counter store: recovery could not mark the slot groups it found held \
                     ({e}); those not marked join the new epoch as before"
                );
                return;
            }
        }
    }
}
