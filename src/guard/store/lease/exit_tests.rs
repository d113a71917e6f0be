//! The give-back at exit (`timer::give_back_everywhere`) meeting another thread in it: a pool
//! worker's exit flush (its main thread) and SIGTERM's (the exit thread) at once. Each test
//! runs in a forked child: the give-back at exit is the whole process's.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::timer::{give_back_everywhere, STORES};
use super::{LeaseOptions, LeasedStore};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::rule::{CounterId, Metric, Scope};
use crate::guard::domain::window::Window;
use crate::guard::store::{
    expiry_minute, CounterKey, CounterRead, CounterStore, HoldRef, MemoryStore, PartsSettle,
    ReserveItem, ReserveOutcome, Settle, SettleOutcome, StoreFuture, UsageAdd,
};

const NOW: Millis = 1_796_000_000_000;
const DAY_MS: Millis = 86_400_000;

fn model_total_key() -> CounterKey {
    let window: Window = "day".parse().unwrap();
    let id = CounterId::new(
        Scope::ModelTotal,
        None,
        None,
        Some("m".into()),
        Metric::Tokens,
        window,
    );
    CounterKey {
        id: Arc::new(id),
        bucket: window.bucket_start(NOW),
    }
}

/// A call of `hold` on `key` through `leased` (it leases from the first call), billed `used`:
/// the lease stays, with that use still to tell the store.
fn one_call(leased: &LeasedStore, key: &CounterKey, hold: u64, used: u64) {
    let minute = expiry_minute(NOW, 15 * 60_000);
    let item = ReserveItem {
        key: key.clone(),
        hold,
        limit: Some(1_000_000),
        carried: 0,
        retain_until: NOW + DAY_MS,
    };
    let reserved = leased.reserve("t".into(), vec![item], minute, NOW);
    assert_eq!(
        crate::runtime::block_on(reserved).unwrap(),
        ReserveOutcome::Reserved
    );
    let settle = Settle {
        id: "t".into(),
        ticket: "t".into(),
        holds: vec![HoldRef {
            key: key.clone(),
            amount: hold,
        }],
        expiry_minute: minute,
        adds: vec![UsageAdd {
            key: key.clone(),
            amount: used,
            retain_until: NOW + DAY_MS,
        }],
        settled_until: NOW + 300_000,
    };
    crate::runtime::block_on(leased.settle(&settle, NOW)).unwrap();
}

/// Before, the give-back that found the list of stores held by the other one (for the
/// microseconds it lists them) answered "nothing to give back" at once; SIGTERM's exit thread
/// then ended the worker under the main thread's give-back, and the lease stayed held until
/// its expiry (`test_the_children_of_multiprocessing_flush[pool-leased]` in
/// tests_py/exits/test_exits.py left one worker's slice, 40 tokens, held with every bill
/// counted). Now it waits for the list, and gives the lease back.
#[test]
fn an_exit_give_back_that_finds_the_stores_listed_by_another_waits_and_gives_back() {
    let code = crate::fork::in_child(Duration::from_secs(60), || {
        let inner = Arc::new(MemoryStore::new());
        let options = LeaseOptions {
            above_per_second: 0.0,
            ..LeaseOptions::default()
        };
        let leased = LeasedStore::new(inner.clone(), options);
        let key = model_total_key();
        one_call(&leased, &key, 6, 5);
        assert_eq!(leased.leases(), 1);
        // Another thread lists the stores (the other exit flush) as this one gets there.
        let (listing, listed) = std::sync::mpsc::channel();
        let other = std::thread::spawn(move || {
            let _stores = STORES.lock();
            listing.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
        });
        listed.recv().unwrap();
        let left = give_back_everywhere(Duration::from_secs(5));
        other.join().unwrap();
        let read = inner.read_now(&[key], NOW)[0];
        let given_back = (left, leased.leases(), read.used, read.held) == (0, 0, 5, 0);
        i32::from(!given_back)
    });
    assert_eq!(code, Some(0), "the lease was not given back");
}

/// A memory store whose settles, while `closed`, wait until the gate opens (a give-back's
/// settle of its lease stays in flight meanwhile); `entered` counts the settles that waited.
#[derive(Debug)]
struct Gated {
    inner: MemoryStore,
    closed: AtomicBool,
    entered: AtomicUsize,
    gate: tokio::sync::Semaphore,
}

impl CounterStore for Gated {
    fn read(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<CounterRead>> {
        self.inner.read(keys, now)
    }

    fn reserve(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
    ) -> StoreFuture<'_, ReserveOutcome> {
        self.inner.reserve(ticket, items, expiry_minute, now)
    }

    fn settle(&self, settle: &Settle, now: Millis) -> StoreFuture<'_, SettleOutcome> {
        let settle = settle.clone();
        StoreFuture::boxed(async move {
            if self.closed.load(Ordering::SeqCst) {
                self.entered.fetch_add(1, Ordering::SeqCst);
                drop(self.gate.acquire().await);
            }
            self.inner.settle(&settle, now).await
        })
    }

    fn settle_parts(
        &self,
        settle: &PartsSettle,
        now: Millis,
    ) -> StoreFuture<'_, Vec<SettleOutcome>> {
        self.inner.settle_parts(settle, now)
    }
}

/// The give-back at exit that comes second returns only once the first ended: the exit
/// thread that then ends the process by SIGTERM (or the main thread by `os._exit`) never cuts
/// the other one's give-back short. (This held before too, by the wait for a renewal in
/// flight, once the second got past the list of stores; now it waits for the first whole.)
#[test]
fn a_second_exit_give_back_returns_once_the_first_has_given_back() {
    let code = crate::fork::in_child(Duration::from_secs(60), || {
        let gated = Arc::new(Gated {
            inner: MemoryStore::new(),
            closed: AtomicBool::new(false),
            entered: AtomicUsize::new(0),
            gate: tokio::sync::Semaphore::new(0),
        });
        let options = LeaseOptions {
            above_per_second: 0.0,
            ..LeaseOptions::default()
        };
        let leased = LeasedStore::new(gated.clone(), options);
        let key = model_total_key();
        one_call(&leased, &key, 6, 5);
        gated.closed.store(true, Ordering::SeqCst);
        let first = std::thread::spawn(|| give_back_everywhere(Duration::from_secs(5)));
        while gated.entered.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (answer, second) = std::sync::mpsc::channel();
        std::thread::spawn(move || answer.send(give_back_everywhere(Duration::from_secs(5))));
        let waited = second.recv_timeout(Duration::from_millis(200)).is_err();
        gated.closed.store(false, Ordering::SeqCst);
        gated.gate.add_permits(1_000);
        let lefts = (first.join().unwrap(), second.recv().unwrap());
        let read = gated.inner.read_now(&[key], NOW)[0];
        let ok = waited && lefts == (0, 0) && (leased.leases(), read.used, read.held) == (0, 5, 0);
        i32::from(!ok)
    });
    assert_eq!(
        code,
        Some(0),
        "the second give-back did not wait, or a lease stayed"
    );
}
