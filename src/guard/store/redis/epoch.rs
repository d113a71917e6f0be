//! The epoch fence's store side (docs/redis.md, "The epoch fence"): the epoch hash
//! `<store tag>:epoch` (generation, the writing Redis process's `run_id`, and the registries
//! of fenced counters), the recovery lock `<store tag>:epoch:lock`, and the store checks.
//! (With slot groups each group keeps a copy of the epoch: `groups.rs`.)

use super::args::Args;
use super::checks::Checks;
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{EpochRead, StoreCheck, StoreFuture};

/// A glob pattern matching `text` alone (glob characters escaped), then `*` if `any_after`.
fn glob_of(text: &str, any_after: bool) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    if any_after {
        out.push('*');
    }
    out
}

/// What initial adoption looks for (`epoch.lua`: an epoch is adopted only where nothing
/// matches): every counter key of the store; with slot groups, whose counters live in other
/// slots, the list of the groups that ever held a fenced counter (`groups.rs`).
fn used_pattern(store: &RedisStore) -> String {
    match store.inner.group_head {
        Some(_) => glob_of(&super::groups::groups_key(&store.inner.home), false),
        None => glob_of(&store.inner.key_head, true),
    }
}

impl RedisStore {
    /// The epoch script's keys: the epoch, then the recovery lock.
    fn epoch_keys(&self) -> Args {
        Args::of([&self.inner.epoch_key, &self.inner.lock_key])
    }

    pub(super) fn read_epoch(&self) -> StoreFuture<'static, EpochRead> {
        let keys = self.epoch_keys();
        self.run("epoch", move |inner, mut conn| async move {
            let args = Args::of(["read"]);
            let (generation, trusted): (String, i64) =
                invoke(&inner.scripts.epoch, &keys, &args, &mut conn).await?;
            Ok(EpochRead {
                generation: (!generation.is_empty()).then_some(generation),
                trusted: trusted == 1,
            })
        })
    }

    /// The epoch's generation: one `HGET`, no script (`read_epoch`'s `INFO`, for the trust,
    /// costs ~35 k instructions).
    pub(super) fn read_generation(&self) -> StoreFuture<'static, Option<String>> {
        let key = self.inner.epoch_key.clone();
        self.run("epoch", move |_, mut conn| async move {
            let generation: Option<String> = redis::cmd("HGET")
                .arg(&key)
                .arg("g")
                .query_async(&mut conn)
                .await?;
            Ok(generation.filter(|g| !g.is_empty()))
        })
    }

    pub(super) fn lock_epoch(&self, token: String, ttl_ms: u64) -> StoreFuture<'static, bool> {
        let key = self.inner.lock_key.clone();
        self.run("epoch lock", move |_, mut conn| async move {
            let set: redis::Value = redis::cmd("SET")
                .arg(&key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(ttl_ms.max(1))
                .query_async(&mut conn)
                .await?;
            if set != redis::Value::Nil {
                return Ok(true);
            }
            // Taken: by another guard, or by this very request, run once already on a
            // connection dropped before it answered (a resend: `Conn`).
            let holder: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut conn).await?;
            Ok(holder.as_deref() == Some(token.as_str()))
        })
    }

    pub(super) fn unlock_epoch(&self, token: String) -> StoreFuture<'static, ()> {
        let keys = self.epoch_keys();
        self.run("epoch unlock", move |inner, mut conn| async move {
            let args = Args::of(["unlock", &token]);
            let _: i64 = invoke(&inner.scripts.epoch, &keys, &args, &mut conn).await?;
            Ok(())
        })
    }

    /// Writes the store's epoch (`epoch.lua`). A forced write of a grouped store (a
    /// recovery) first looks at which groups hold their copy, and marks them before it
    /// writes (`group_sweep.rs`).
    pub(super) fn write_epoch(
        &self,
        generation: String,
        now: Millis,
        token: Option<String>,
        adopt: bool,
        hold_again_until: Millis,
    ) -> StoreFuture<'static, bool> {
        let keys = self.epoch_keys();
        let mut args = Args::of(["write", &generation]);
        args.push_num(now);
        args.push(token.as_deref().unwrap_or_default());
        args.push(if adopt { "adopt" } else { "force" });
        args.push(&used_pattern(self));
        args.push_num(hold_again_until.max(0));
        let write = move |store: &RedisStore| {
            store.run("epoch write", move |inner, mut conn| async move {
                let answer: String = invoke(&inner.scripts.epoch, &keys, &args, &mut conn).await?;
                Ok(answer == "ok")
            })
        };
        if adopt || !self.grouped() {
            return write(self);
        }
        let store = self.clone();
        StoreFuture::boxed(async move {
            let started = std::time::Instant::now();
            let held = store.groups_held_now(started, now).await;
            let lock = token.as_deref().unwrap_or_default();
            store.mark_held(&generation, lock, held, started).await;
            write(&store).await
        })
    }

    pub(super) fn check_store(&self, wait: bool) -> StoreFuture<'static, StoreCheck> {
        let inner = self.inner.clone();
        StoreFuture::boxed(async move {
            Ok(if wait {
                Checks::wait(&inner).await
            } else {
                inner.checks().outcome()
            })
        })
    }

    /// Asks for the store checks to run again (coalesced with any in flight).
    pub fn request_checks(&self) {
        Checks::request(&self.inner);
    }

    /// How many times the store checks have run (one at a time, at most one follow-up).
    pub fn check_runs(&self) -> u64 {
        self.inner
            .checks()
            .runs
            .load(std::sync::atomic::Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adoption_patterns_escape_glob_characters() {
        assert_eq!(glob_of("{a*b}:c:", true), "{a\\*b}:c:*");
        assert_eq!(glob_of("{a?[b]}:groups", false), "{a\\?\\[b\\]}:groups");
    }
}
