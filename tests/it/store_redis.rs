//! One store test-suite, run against the memory store, a real redis-server and a real
//! 3-master Redis Cluster, each Redis in the shared layout and with slot groups (and the
//! redis-server once more with its scripts called by SHA instead of as functions), so all
//! six provably agree.
#![cfg(feature = "redis")]

use crate::common;
mod store_cases_core;
mod store_cases_fill;
mod store_cases_parts;
mod store_cases_queue;

mod store_cases {
    pub use super::store_cases_core::*;
    pub use super::store_cases_fill::*;
    pub use super::store_cases_parts::*;
    pub use super::store_cases_queue::*;
}

use std::sync::Arc;

use common::redis_server::{RedisCluster, RedisServer};
use usage_guard::{CounterStore, MemoryStore, RedisStore};

const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// A store under test and the servers it needs (kept alive as long as the store).
pub struct Fixture {
    pub store: Arc<dyn CounterStore>,
    pub redis: Option<RedisStore>,
    pub server: Option<RedisServer>,
    pub cluster: Option<Arc<RedisCluster>>,
}

/// Which store a case runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Memory,
    Redis,
    Cluster,
    /// A redis-server with slot groups (each owner's counters under a tag of their own).
    GroupedRedis,
    /// A redis-server whose store calls its scripts by SHA (`without_functions`), where the
    /// others load them as a function library.
    RedisScripts,
    /// The cluster with slot groups: one operation's groups on several masters.
    GroupedCluster,
}

/// A fresh store of `kind`; Redis stores get a prefix of their own.
pub fn fixture(kind: Kind, case: &str) -> Fixture {
    match kind {
        Kind::Memory => Fixture {
            store: Arc::new(MemoryStore::new()),
            redis: None,
            server: None,
            cluster: None,
        },
        Kind::Redis | Kind::GroupedRedis | Kind::RedisScripts => {
            let server = RedisServer::start();
            let prefix = format!("t-{case}");
            let store = match kind {
                Kind::GroupedRedis => RedisStore::connect_grouped(&server.url(), &prefix, TIMEOUT),
                _ => RedisStore::connect(&server.url(), &prefix),
            }
            .unwrap();
            if kind == Kind::RedisScripts {
                store.without_functions();
            }
            assert_eq!(store.uses_functions(), kind != Kind::RedisScripts);
            Fixture {
                store: Arc::new(store.clone()),
                redis: Some(store),
                server: Some(server),
                cluster: None,
            }
        }
        Kind::Cluster | Kind::GroupedCluster => {
            let cluster = RedisCluster::shared();
            let prefix = format!("t-{case}");
            let store = match kind {
                Kind::GroupedCluster => {
                    RedisStore::cluster_grouped(&cluster.urls(), &prefix, TIMEOUT)
                }
                _ => RedisStore::cluster(&cluster.urls(), &prefix),
            }
            .unwrap();
            Fixture {
                store: Arc::new(store.clone()),
                redis: Some(store),
                server: None,
                cluster: Some(cluster),
            }
        }
    }
}

macro_rules! suite {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(#[test] fn $case() { crate::store_redis::store_cases::$case(crate::store_redis::Kind::Memory) })*
        }
        mod redis {
            $(#[test] fn $case() { crate::store_redis::store_cases::$case(crate::store_redis::Kind::Redis) })*
        }
        mod cluster {
            $(#[test] fn $case() { crate::store_redis::store_cases::$case(crate::store_redis::Kind::Cluster) })*
        }
        mod redis_scripts {
            $(#[test] fn $case() { crate::store_redis::store_cases::$case(crate::store_redis::Kind::RedisScripts) })*
        }
        mod grouped_redis {
            $(#[test] fn $case() { crate::store_redis::store_cases::$case(crate::store_redis::Kind::GroupedRedis) })*
        }
        mod grouped_cluster {
            $(#[test] fn $case() { crate::store_redis::store_cases::$case(crate::store_redis::Kind::GroupedCluster) })*
        }
    };
}

suite!(
    reserve_is_all_or_none,
    limits_are_checked_at_their_edges,
    carried_counts_against_the_limit,
    holds_expire_by_minute,
    settle_gives_back_and_never_goes_negative,
    settle_after_expiry_only_adds,
    release_of_a_reserve_that_never_landed_is_a_no_op,
    reserve_after_settle_places_nothing,
    bill_twice_counts_once,
    holds_count_across_buckets,
    counters_are_gone_after_retention,
    weird_ids_never_collide,
    concurrent_reservations_never_exceed_the_limit,
    empty_operations_are_no_ops,
    large_amounts_stay_exact,
    fill_happens_once_and_keeps_the_larger,
    marks_are_set_once_until_they_expire,
    parts_settle_once_by_bill_or_finish,
    parts_of_a_batch_never_landed_give_nothing_back,
    many_parts_settle_in_one_call,
    queues_are_first_in_first_out,
    a_full_queue_joins_nothing,
    a_lapsed_waiter_drops_out,
);
