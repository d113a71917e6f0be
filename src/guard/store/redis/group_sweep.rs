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

/// How long the look may take before it stops (the groups not looked at are left as they
/// were): well within the recovery lock's 10 s, which the epoch's write needs.
const LOOK_FOR: Duration = Duration::from_secs(3);

impl RedisStore {
    /// The groups listed in the store's list whose copy of the epoch is there and of its
    /// master's process now. Stops early (with what it found) at an error or after
    /// `LOOK_FOR`, and says so in the log.
    pub(super) async fn groups_held_now(&self) -> Vec<String> {
        let started = Instant::now();
        let mut held = Vec::new();
        let mut cursor = 0u64;
        loop {
            let page = self.held_page(cursor).await;
            let (next, found) = match page {
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
            if next == 0 {
                return held;
            }
            if started.elapsed() > LOOK_FOR {
                log::warn!(
                    "counter store: recovery looked at {} slot groups' epochs in {:?} and \
                     stopped; the groups not looked at join the new epoch as before",
                    held.len(),
                    LOOK_FOR
                );
                return held;
            }
            cursor = next;
        }
    }

    /// One page of the list from `cursor`: the next cursor (0 at the end) and the page's
    /// groups whose copy is there and of its master's process.
    async fn held_page(&self, cursor: u64) -> Result<(u64, Vec<String>), StoreError> {
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
            let mut held = Vec::new();
            for (tag, look) in tags.iter().zip(join_all(looks).await) {
                let (generation, trusted) = look?;
                if !generation.is_empty() && trusted == 1 {
                    held.push(tag.clone());
                }
            }
            Ok((next, held))
        })
        .await
    }

    /// Marks `held` as held at the recovery about to write `generation` (while the recovery
    /// lock is still `token`'s, or without one when `token` is empty). A failure is logged:
    /// those groups join as before.
    pub(super) async fn mark_held(&self, generation: &str, token: &str, held: Vec<String>) {
        for page in held.chunks(PAGE) {
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
