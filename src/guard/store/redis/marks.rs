//! The Redis store's single-key steps: fill marks (`filled`, `fill`), `mark_once` marks and
//! `raise_until` notes (shared provider health), the last two under `{<prefix>}:m:`.

use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{CounterKey, StoreFuture};

impl RedisStore {
    /// `filled`: one script call over every key (and the epoch).
    pub(super) fn filled_call(
        &self,
        keys: Vec<CounterKey>,
        now: Millis,
    ) -> StoreFuture<'_, Vec<bool>> {
        if keys.is_empty() {
            return Box::pin(std::future::ready(Ok(Vec::new())));
        }
        let mut redis_keys: Vec<String> = keys.iter().map(|k| self.redis_key(k)).collect();
        redis_keys.push(self.inner.epoch_key.clone());
        self.run("filled", move |inner, mut conn| async move {
            let mut call = inner.scripts.filled.prepare_invoke();
            call.key(redis_keys).arg(now);
            let marks: Vec<i64> = call.invoke_async(&mut conn).await?;
            Ok(marks.into_iter().map(|m| m == 1).collect())
        })
    }

    /// `fill`: one script call.
    pub(super) fn fill_call(
        &self,
        key: CounterKey,
        ledger_used: u64,
        retain_until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, bool> {
        let redis_keys = [self.redis_key(&key), self.inner.epoch_key.clone()];
        self.run("fill", move |inner, mut conn| async move {
            let mut call = inner.scripts.fill.prepare_invoke();
            call.key(&redis_keys[..])
                .arg(now)
                .arg(ledger_used)
                .arg(retain_until);
            let filled: i64 = call.invoke_async(&mut conn).await?;
            Ok(filled == 1)
        })
    }

    /// `mark_once`: one script call.
    pub(super) fn mark_once_call(
        &self,
        mark: String,
        keep_until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, bool> {
        let redis_key = self.mark_key(&mark);
        self.run("mark_once", move |inner, mut conn| async move {
            let mut call = inner.scripts.mark_once.prepare_invoke();
            call.key(redis_key).arg(now).arg(keep_until);
            let set: i64 = call.invoke_async(&mut conn).await?;
            Ok(set == 1)
        })
    }

    /// The Redis key of a `raise_until` note: the mark key of `until:<key>`.
    fn note_key(&self, key: &str) -> String {
        self.mark_key(&format!("until:{key}"))
    }

    /// `raise_until`: one script call.
    pub(super) fn raise_until_call(
        &self,
        key: String,
        until: Millis,
        note: String,
        now: Millis,
    ) -> StoreFuture<'_, ()> {
        let redis_key = self.note_key(&key);
        self.run("raise_until", move |inner, mut conn| async move {
            let mut call = inner.scripts.raise_until.prepare_invoke();
            call.key(redis_key).arg(now).arg(until).arg(note);
            let _: i64 = call.invoke_async(&mut conn).await?;
            Ok(())
        })
    }

    /// `read_until`: one MGET (every key shares the store's hash tag).
    pub(super) fn read_until_call(
        &self,
        keys: Vec<String>,
        now: Millis,
    ) -> StoreFuture<'_, Vec<Option<(Millis, String)>>> {
        if keys.is_empty() {
            return Box::pin(std::future::ready(Ok(Vec::new())));
        }
        let redis_keys: Vec<String> = keys.iter().map(|k| self.note_key(k)).collect();
        self.run("read_until", move |_, mut conn| async move {
            let values: Vec<Option<String>> = redis::cmd("MGET")
                .arg(redis_keys)
                .query_async(&mut conn)
                .await?;
            Ok(values.into_iter().map(|v| parse_note(v?, now)).collect())
        })
    }
}

/// A note `<until>|<note>` still ahead of `now`.
fn parse_note(value: String, now: Millis) -> Option<(Millis, String)> {
    let (until, note) = value.split_once('|')?;
    let until: Millis = until.parse().ok()?;
    (until > now).then(|| (until, note.to_string()))
}
