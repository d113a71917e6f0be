//! What a recovery of a grouped store marks (docs/redis.md, "Slot groups"): the groups whose
//! copy of the epoch was there, and written by a process that is a master now, just before
//! the new generation was written. A group joins a new generation lazily (on its first
//! reserve under it), so without a mark a group that lost its copy after the recovery, before
//! it joined, would look like one that lost it before: joined as new, its counters trusted as
//! they are (and, on a guard whose fills are remembered, not filled again). Marked, its
//! missing copy is a loss under the new generation and the one before it (`groups.lua`:
//! listed as `~<new>|<before>`), so the reserve answers `Untrusted` and the guards recover
//! again.
//!
//! The look and the marks come before the write: a group lost after the look is fenced (one
//! recovery more, never a loss trusted). A group whose copy was already missing, or whose
//! master did not answer, is left as it was: its counters are filled again under the new
//! generation when it joins, as before.
//!
//! The look reads each copy with a plain `HMGET` (no script, no `INFO` a group) and compares
//! the process that wrote it with the masters' `run_id`s, read once a recovery. A copy of a
//! process that is a master of another slot now (a resharded slot) counts as there: marked,
//! a later loss of it is fenced, the safe side; a copy of a process that is no master now
//! (a master failed over or restarted from its file) is not marked, as before.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::RedisResult;

use super::args::Args;
use super::connection::Conn;
use super::groups::groups_key;
use super::keys::write_epoch_key;
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::domain::clock::Millis;
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

    /// The groups listed in the store's list (entries whose time is not over at `now`:
    /// `group_join.rs`) whose copy of the epoch is there and of its master's process now.
    /// Stops early (with what it found) when the list cannot be read or `LOOK_BY` comes near,
    /// and says so in the log.
    pub(super) async fn groups_held_now(&self, started: Instant, now: Millis) -> Vec<String> {
        let (mut held, mut looked) = (Vec::new(), 0);
        let masters = self
            .run("recovery look", |_, mut conn| async move {
                masters_run_ids(&mut conn).await
            })
            .await;
        let masters = match masters {
            Ok(masters) => Arc::new(masters),
            Err(e) => {
                log::warn!(
                    "counter store: recovery could not read its masters' process ids ({e}); \
                     the slot groups join the new epoch as before"
                );
                return held;
            }
        };
        let mut cursor = 0u64;
        loop {
            if !self.page_fits(cursor == 0, started, LOOK_BY) {
                log::warn!(
                    "counter store: recovery looked at {looked} slot groups' epochs and stopped \
                     (within {LOOK_BY:?}); the groups not looked at join the new epoch as before"
                );
                return held;
            }
            let page = self.held_page(cursor, masters.clone(), now).await;
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
    /// it listed, and those whose entry lasts at `now` and whose copy is there and of a
    /// process in `masters`.
    async fn held_page(
        &self,
        cursor: u64,
        masters: Arc<HashSet<String>>,
        now: Millis,
    ) -> Result<(u64, usize, Vec<String>), StoreError> {
        let list = groups_key(&self.inner.home);
        self.run("recovery look", move |_, mut conn| async move {
            let (next, flat): (u64, Vec<String>) = redis::cmd("HSCAN")
                .arg(&list)
                .arg(cursor)
                .arg("COUNT")
                .arg(PAGE)
                .query_async(&mut conn)
                .await?;
            let listed = flat.len() / 2;
            let tags: Vec<String> = flat
                .chunks_exact(2)
                .filter(|entry| lasts(&entry[1], now))
                .map(|entry| entry[0].clone())
                .collect();
            let looks = look_at_copies(&mut conn, &tags).await?;
            // A group whose master did not answer is not marked (it joins as before); the
            // others of the page are.
            let mut held = Vec::new();
            for (tag, look) in tags.iter().zip(looks) {
                if let Ok((Some(generation), Some(writer))) = look {
                    if !generation.is_empty() && masters.contains(&writer) {
                        held.push(tag.clone());
                    }
                }
            }
            Ok((next, listed, held))
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

/// Whether an entry of the list (`<body>@<until>`, or a body alone: written before entries
/// had a time) lasts at `now` (`groups.lua`).
fn lasts(entry: &str, now: Millis) -> bool {
    match entry.rsplit_once('@') {
        Some((_, until)) => until.parse::<Millis>().map_or(true, |until| until > now),
        None => true,
    }
}

/// Each group's copy of the epoch: its generation and the process that wrote it. On one
/// node, one pipeline (one round trip); on a cluster, each copy asked of its master, all at
/// once on the multiplexed connection (a master that does not answer fails only its own).
async fn look_at_copies(conn: &mut Conn, tags: &[String]) -> RedisResult<Vec<RedisResult<Copy>>> {
    let hmget = |tag: &str| {
        let mut copy = String::with_capacity(tag.len() + 6);
        write_epoch_key(tag, &mut copy);
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(copy).arg("g").arg("r");
        cmd
    };
    if tags.is_empty() {
        return Ok(Vec::new()); // an empty page (a pipeline of nothing is no command)
    }
    if !matches!(conn, Conn::Cluster(_)) {
        let mut pipe = redis::pipe();
        for tag in tags {
            pipe.add_command(hmget(tag));
        }
        let copies: Vec<Copy> = pipe.query_async(conn).await?;
        return Ok(copies.into_iter().map(Ok).collect());
    }
    let looks = tags.iter().map(|tag| {
        let (mut conn, cmd) = (conn.clone(), hmget(tag));
        async move { cmd.query_async::<Copy>(&mut conn).await }
    });
    Ok(join_all(looks).await)
}

/// A copy of the epoch as the look reads it: its generation and its writer's `run_id`.
type Copy = (Option<String>, Option<String>);

/// The `run_id` of each master's process: one `INFO server` (a cluster's masters, from
/// `CLUSTER SLOTS`, each asked by address; one that does not answer is left out, and the
/// groups it holds are not marked).
async fn masters_run_ids(conn: &mut Conn) -> RedisResult<HashSet<String>> {
    let mut ids = HashSet::new();
    let Conn::Cluster(cluster) = conn else {
        let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
        ids.extend(run_id_in(&info));
        return Ok(ids);
    };
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(cluster)
        .await?;
    let masters: HashSet<(String, u16)> = ranges.iter().filter_map(master_of_range).collect();
    let infos = masters.into_iter().map(|(host, port)| {
        let mut cluster = cluster.clone();
        async move {
            let node = SingleNodeRoutingInfo::ByAddress { host, port };
            let mut info = redis::cmd("INFO");
            info.arg("server");
            let answer = cluster
                .route_command(info, RoutingInfo::SingleNode(node))
                .await?;
            redis::from_redis_value_ref::<String>(&answer).map_err(redis::RedisError::from)
        }
    });
    for info in join_all(infos).await.into_iter().flatten() {
        ids.extend(run_id_in(&info));
    }
    Ok(ids)
}

/// The master's address of one `CLUSTER SLOTS` range (`[start, end, [host, port, …], …]`).
fn master_of_range(range: &redis::Value) -> Option<(String, u16)> {
    let redis::Value::Array(parts) = range else {
        return None;
    };
    let redis::Value::Array(node) = parts.get(2)? else {
        return None;
    };
    let host = redis::from_redis_value_ref::<String>(node.first()?).ok()?;
    let port = redis::from_redis_value_ref::<u16>(node.get(1)?).ok()?;
    (!host.is_empty()).then_some((host, port))
}

/// The `run_id` in an `INFO server` answer (its 40 characters, as `epoch.lua` reads it).
fn run_id_in(info: &str) -> Option<String> {
    let at = info.find("run_id:")? + "run_id:".len();
    info.get(at..at + 40).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::{lasts, master_of_range, run_id_in};

    #[test]
    fn an_entry_lasts_until_its_time_or_for_ever_without_one() {
        assert!(lasts("g1@1000", 999));
        assert!(!lasts("g1@1000", 1000));
        assert!(!lasts("~g2|g1@1000", 2000));
        assert!(lasts("~g2|g1", i64::MAX));
    }

    #[test]
    fn a_run_id_and_a_ranges_master_are_read_from_their_answers() {
        let id = "a".repeat(40);
        let info = format!("# Server\r\nredis_version:7.0.15\r\nrun_id:{id}\r\ntcp_port:7000\r\n");
        assert_eq!(run_id_in(&info), Some(id));
        assert_eq!(run_id_in("run_id:short"), None);
        let node = |host: &str| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(7001),
                Value::BulkString(b"node-id".to_vec()),
            ])
        };
        let range = |host: &str| Value::Array(vec![Value::Int(0), Value::Int(5460), node(host)]);
        assert_eq!(
            master_of_range(&range("127.0.0.1")),
            Some(("127.0.0.1".to_string(), 7001))
        );
        // An unknown endpoint (an empty host) is no address to ask.
        assert_eq!(master_of_range(&range("")), None);
        assert_eq!(master_of_range(&Value::Int(3)), None);
    }
}
