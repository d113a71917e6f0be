//! The Redis store's single-key steps: fill marks (`filled`, `fill`), `mark_once` marks and
//! `raise_until` notes (shared provider health), the last two under `{<prefix>}:m:`.

use futures::future::join_all;

use super::args::Args;
use super::keys::write_epoch_key;
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{CounterKey, StoreFuture};

impl RedisStore {
    /// `filled`: one script call over every key (and the epoch); with slot groups, one per
    /// group, each against the group's copy of the epoch.
    pub(super) fn filled_call(
        &self,
        keys: Vec<CounterKey>,
        now: Millis,
    ) -> StoreFuture<'_, Vec<bool>> {
        if keys.is_empty() {
            return StoreFuture::ready(Ok(Vec::new()));
        }
        let copy = if self.grouped() { "1" } else { "0" };
        let calls: Vec<(Vec<usize>, Args)> = self
            .split(keys.iter().map(|k| &*k.id))
            .into_iter()
            .map(|(tag, members)| {
                let mut redis_keys = Args::with_capacity(members.len() + 1, 96 * members.len());
                for &i in &members {
                    redis_keys.push_with(|out| self.write_redis_key(&keys[i], out));
                }
                redis_keys.push_with(|out| write_epoch_key(&tag, out));
                (members, redis_keys)
            })
            .collect();
        let mut args = Args::default();
        args.push_num(now);
        args.push(copy);
        let count = keys.len();
        self.run("filled", move |inner, conn| async move {
            let sent = calls.iter().map(|(_, redis_keys)| {
                let (mut conn, args, script) = (conn.clone(), &args, &inner.scripts.filled);
                async move { invoke::<Vec<i64>, _>(script, redis_keys, args, &mut conn).await }
            });
            let mut out = vec![false; count];
            for ((members, _), marks) in calls.iter().zip(join_all(sent).await) {
                for (mark, &i) in marks?.into_iter().zip(members) {
                    out[i] = mark == 1;
                }
            }
            Ok(out)
        })
    }

    /// `fill`: one script call (against the epoch of the counter's group).
    pub(super) fn fill_call(
        &self,
        key: CounterKey,
        ledger_used: u64,
        retain_until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, bool> {
        let mut redis_keys = Args::of([&self.redis_key(&key)]);
        redis_keys.push_with(|out| write_epoch_key(&self.tag_of(&key.id), out));
        let mut args = Args::default();
        args.push_num(now);
        args.push_num(ledger_used);
        args.push_num(retain_until);
        args.push(if self.grouped() { "1" } else { "0" });
        self.run("fill", move |inner, mut conn| async move {
            let filled: i64 = invoke(&inner.scripts.fill, &redis_keys, &args, &mut conn).await?;
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
        let redis_keys = Args::of([self.mark_key(&mark)]);
        let mut args = Args::default();
        args.push_num(now);
        args.push_num(keep_until);
        self.run("mark_once", move |inner, mut conn| async move {
            let set: i64 = invoke(&inner.scripts.mark_once, &redis_keys, &args, &mut conn).await?;
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
        let redis_keys = Args::of([self.note_key(&key)]);
        let mut args = Args::default();
        args.push_num(now);
        args.push_num(until);
        args.push(&note);
        self.run("raise_until", move |inner, mut conn| async move {
            let _: i64 = invoke(&inner.scripts.raise_until, &redis_keys, &args, &mut conn).await?;
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
            return StoreFuture::ready(Ok(Vec::new()));
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
