//! The upgrade from the shared layout to slot groups (docs/redis.md, "Slot groups"): a store
//! with slot groups copies the counters and holds the same prefix's shared-layout store holds
//! into their groups (`migrate_read.lua` pages through the shared store's one slot,
//! `migrate_write.lua` writes each group's keys, adding what earlier runs did not copy).

use std::collections::HashMap;

use futures::stream::{self, StreamExt};

use super::args::Args;
use super::groups::protocol_error;
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::store::{StoreError, StoreFuture};

/// Group writes in flight at once during a migration.
const WRITES_AHEAD: usize = 64;

/// What `migrate_from_shared` found and copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Migrated {
    /// Keys of the shared layout read (counter buckets and holds keys).
    pub read: u64,
    /// Counter buckets whose use this run added or raised (0 on a second run).
    pub counters: u64,
    /// Holds keys (a counter's open holds) this run added to (0 on a second run).
    pub holds: u64,
    /// Buckets the new layout had already filled from its ledger: the larger use was kept,
    /// not the sum (the ledger is taken to count the old layout's use already).
    pub filled: u64,
    /// Keys under the store's names that are no counter or holds of it (not hashes, or of
    /// no owner): left as they are.
    pub skipped: u64,
}

/// What one page's writes did.
#[derive(Default)]
struct Wrote {
    /// Keys whose use or holds were added to or raised.
    changed: u64,
    /// Buckets found filled from the ledger.
    filled: u64,
    /// Keys of no owner, not written.
    ownerless: u64,
}

/// One key read from the shared layout: its name, time to live (ms, -1 none) and fields.
struct Read {
    key: String,
    ttl: i64,
    fields: Vec<(String, String)>,
}

impl RedisStore {
    /// Copies what the shared-layout store of this store's prefix (`{<prefix>}`) holds —
    /// counter buckets and holds — into this store's slot groups, each to its owner's group.
    /// Use and holds read beyond what an earlier run copied are added (a bucket already filled
    /// from the ledger, whose sum counts the old layout's use, takes the larger), and each
    /// retain-until becomes the larger, so a second run, or use counted in the new layout
    /// before or after, is never counted twice or lost; times to live are kept. Ticket records, marks and the epoch are not
    /// copied: stop the guards of the old layout first (their open calls' holds are copied
    /// and expire as they would have). Each round trip must answer within the store's
    /// `timeout`; the whole copy has no bound (it takes as long as the store is large).
    /// Fails on a store without slot groups.
    pub fn migrate_from_shared(&self) -> StoreFuture<'static, Migrated> {
        let Some(head) = self.inner.group_head.clone() else {
            return StoreFuture::ready(Err(StoreError(
                "migrate_from_shared: this store has no slot groups (slot_groups=True)".into(),
            )));
        };
        // `{<escaped prefix>:2:` → `{<escaped prefix>}`
        let old_tag = format!("{}}}", &head[..head.len() - ":2:".len()]);
        let store = self.clone();
        self.run_paged("migrate", move |inner, mut conn| async move {
            let route = Args::of([format!("{old_tag}:epoch")]);
            let mut done = Migrated::default();
            for kind in ["c", "h"] {
                let pattern = glob_escaped(&format!("{old_tag}:{kind}:")) + "*";
                let mut cursor = "0".to_string();
                loop {
                    let args = Args::of([cursor.as_str(), pattern.as_str()]);
                    let page: redis::Value =
                        invoke(&inner.scripts.migrate_read, &route, &args, &mut conn).await?;
                    let (next, skipped, keys) = parse_page(page)?;
                    done.read += keys.len() as u64;
                    done.skipped += skipped;
                    let wrote = store.write_groups(&mut conn, &old_tag, kind, keys).await?;
                    match kind {
                        "c" => done.counters += wrote.changed,
                        _ => done.holds += wrote.changed,
                    }
                    done.filled += wrote.filled;
                    done.skipped += wrote.ownerless;
                    if next == "0" {
                        break;
                    }
                    cursor = next;
                }
            }
            Ok(done)
        })
    }

    /// Writes `keys` (read from the shared layout under `old_tag`, of `kind` `c` or `h`)
    /// into their groups, one script per group.
    async fn write_groups(
        &self,
        conn: &mut super::connection::Conn,
        old_tag: &str,
        kind: &str,
        keys: Vec<Read>,
    ) -> redis::RedisResult<Wrote> {
        let mut groups: HashMap<String, (Args, Args)> = HashMap::new();
        let mut done = Wrote::default();
        for read in keys {
            let rest = &read.key[old_tag.len() + 1 + kind.len() + 1..];
            let Some(owner) = owner_of(rest) else {
                done.ownerless += 1;
                continue;
            };
            let tag = format!(
                "{}{owner}}}",
                self.inner.group_head.as_deref().unwrap_or("")
            );
            let (redis_keys, args) = groups.entry(tag.clone()).or_default();
            redis_keys.push(&format!("{tag}:{kind}:{rest}"));
            args.push_num(read.ttl);
            args.push_num(read.fields.len());
            for (field, value) in &read.fields {
                args.push(field);
                args.push(value);
            }
        }
        // Up to `WRITES_AHEAD` of the page's groups are written at once (each script to its
        // master, pipelined on the multiplexed connection), not one round trip a group; few
        // enough that each answer still comes well within the store's timeout.
        let script = &self.inner.scripts.migrate_write;
        let writes = groups.into_iter().map(|(tag, (mut keys, args))| {
            let mut conn = conn.clone();
            async move {
                // The group's record of what earlier runs copied (`migrate_write.lua`).
                keys.push(&format!("{tag}:migrated"));
                invoke::<(u64, u64), _>(script, &keys, &args, &mut conn).await
            }
        });
        let mut written = stream::iter(writes).buffer_unordered(WRITES_AHEAD);
        while let Some(answer) = written.next().await {
            let (changed, filled) = answer?;
            done.changed += changed;
            done.filled += filled;
        }
        Ok(done)
    }
}

/// The owner (as `CounterId::write_owner` writes it) of the counter whose key, after its tag
/// and kind, is `rest` (`<scope>:<user>:<team>:<model>:…`, or `ru:<subject>:…`): ids in keys
/// are escaped as owners are. `None` for a key of no counter scope.
fn owner_of(rest: &str) -> Option<String> {
    let parts: Vec<&str> = rest.split(':').collect();
    let (kind, id) = match *parts.first()? {
        "pm" | "pa" | "tm" => ("u:", parts.get(1)?),
        "ts" | "tt" => ("t:", parts.get(2)?),
        "mt" | "ps" => ("m:", parts.get(3)?),
        "ru" => ("r:", parts.get(1)?),
        _ => return None,
    };
    Some(format!("{kind}{id}"))
}

/// `text` with glob characters escaped (a SCAN pattern matching it literally).
fn glob_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `migrate_read.lua`'s answer: the next cursor, the keys skipped and the keys read.
fn parse_page(page: redis::Value) -> redis::RedisResult<(String, u64, Vec<Read>)> {
    let bad = |why: &str| protocol_error("migrate", why.to_string());
    let redis::Value::Array(items) = page else {
        return Err(bad("not an array"));
    };
    let text = |v: &redis::Value| -> redis::RedisResult<String> {
        Ok(redis::from_redis_value_ref::<String>(v)?)
    };
    let number = |v: &redis::Value| -> redis::RedisResult<i64> {
        Ok(redis::from_redis_value_ref::<i64>(v)?)
    };
    let mut at = items.iter();
    let next = text(at.next().ok_or_else(|| bad("no cursor"))?)?;
    let skipped = number(at.next().ok_or_else(|| bad("no count skipped"))?)?;
    let mut keys = Vec::new();
    while let Some(key) = at.next() {
        let key = text(key)?;
        let ttl = number(at.next().ok_or_else(|| bad("no ttl"))?)?;
        let count = number(at.next().ok_or_else(|| bad("no count"))?)?;
        let mut fields = Vec::with_capacity(count.max(0) as usize);
        for _ in 0..count {
            let field = text(at.next().ok_or_else(|| bad("no field"))?)?;
            let value = text(at.next().ok_or_else(|| bad("no value"))?)?;
            fields.push((field, value));
        }
        keys.push(Read { key, ttl, fields });
    }
    Ok((next, skipped.max(0) as u64, keys))
}

#[cfg(test)]
mod tests {
    use super::owner_of;

    #[test]
    fn a_shared_key_names_its_owner() {
        assert_eq!(
            owner_of("pm:al%3Aice:-:gpt-5:tokens:day:1").unwrap(),
            "u:al%3Aice"
        );
        assert_eq!(owner_of("tm:bob:t1:gpt-5:cost:day").unwrap(), "u:bob");
        assert_eq!(owner_of("tt:-:t1:-:cost:month:5").unwrap(), "t:t1");
        assert_eq!(owner_of("mt:-:-:gpt-5:tokens:day:9").unwrap(), "m:gpt-5");
        assert_eq!(owner_of("ru:r1/k=a:requests:minute:0").unwrap(), "r:r1/k=a");
        assert_eq!(owner_of("probe"), None);
    }
}
