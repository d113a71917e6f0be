//! The epoch fence's races, with the steps interleaved by hand on a real redis-server and a
//! SQLite ledger: a counter is never reserved under an epoch it was not filled in (or a bill
//! on its way to the store when the fill read the ledger counts twice), and a recovery goes
//! on when the call that began it gives up.
#![cfg(all(feature = "redis", feature = "sqlite"))]

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::redis_server::RedisServer;
use common::{at, policy, OnceHook};
use usage_guard::internals::{
    BackgroundSettling, CounterKey, CounterRead, EpochRead, Fence, Fencing, OutageLog,
    ReserveFromKnown, ReserveItem, ReserveOutcome, Settle, SettleOutcome, StoreFuture,
};
use usage_guard::{
    AdmitRequest, AuditQuery, AuditRow, BillInfo, CounterStore, Guard, Ledger, LedgerError,
    LedgerRow, ManualClock, Metric, RedisStore, RowMaker, SqliteLedger, StoreCheck, StoreError,
    SumFilter, Usage, UsageGroup, UsageQuery,
};

/// A Redis store whose next `read` runs a hook first, whose background settles wait while
/// `settles_held`, and whose epoch writes wait `set_epoch_ms` first.
struct HookedStore {
    inner: RedisStore,
    on_read: OnceHook,
    settles_held: AtomicBool,
    set_epoch_ms: AtomicU64,
}

impl HookedStore {
    fn new(server: &RedisServer) -> Self {
        HookedStore {
            inner: RedisStore::connect(&server.url(), "fence").unwrap(),
            on_read: OnceHook::default(),
            settles_held: AtomicBool::new(false),
            set_epoch_ms: AtomicU64::new(0),
        }
    }

    fn fence(&self) -> &dyn Fencing {
        self.inner.fencing().expect("Redis has a fence")
    }
}

impl std::fmt::Debug for HookedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookedStore")
    }
}

impl CounterStore for HookedStore {
    fn read(&self, keys: Vec<CounterKey>, now: i64) -> StoreFuture<'_, Vec<CounterRead>> {
        self.on_read.run();
        self.inner.read(keys, now)
    }

    fn reserve(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: i64,
    ) -> StoreFuture<'_, ReserveOutcome> {
        self.inner.reserve(ticket, items, expiry_minute, now)
    }

    fn settle(&self, settle: &Settle, now: i64) -> StoreFuture<'_, SettleOutcome> {
        self.inner.settle(settle, now)
    }

    fn fencing(&self) -> Option<&dyn Fencing> {
        Some(self)
    }

    fn reserve_from_known(&self) -> Option<&dyn ReserveFromKnown> {
        self.inner.reserve_from_known()
    }

    fn background_settling(&self) -> Option<&dyn BackgroundSettling> {
        Some(self)
    }

    fn outage(&self) -> &OutageLog {
        self.inner.outage()
    }

    fn filled(&self, keys: Vec<CounterKey>, now: i64) -> StoreFuture<'_, Vec<bool>> {
        self.inner.filled(keys, now)
    }

    fn fill(&self, key: CounterKey, used: u64, retain: i64, now: i64) -> StoreFuture<'_, bool> {
        self.inner.fill(key, used, retain, now)
    }

    fn store_check(&self, wait: bool) -> StoreFuture<'_, StoreCheck> {
        self.inner.store_check(wait)
    }
}

impl BackgroundSettling for HookedStore {
    fn settle_many<'a>(
        &'a self,
        settles: &'a [Settle],
        now: i64,
    ) -> StoreFuture<'a, Vec<Result<SettleOutcome, StoreError>>> {
        StoreFuture::boxed(async move {
            while self.settles_held.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let inner = self.inner.background_settling().expect("Redis settles so");
            inner.settle_many(settles, now).await
        })
    }
}

impl Fencing for HookedStore {
    fn reserve_fenced(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: i64,
        fence: Fence,
    ) -> StoreFuture<'_, ReserveOutcome> {
        self.fence()
            .reserve_fenced(ticket, items, expiry_minute, now, fence)
    }
    fn epoch(&self) -> StoreFuture<'_, EpochRead> {
        self.fence().epoch()
    }
    fn epoch_generation(&self) -> StoreFuture<'_, Option<String>> {
        self.fence().epoch_generation()
    }
    fn epoch_lock(&self, token: String, ttl_ms: u64) -> StoreFuture<'_, bool> {
        self.fence().epoch_lock(token, ttl_ms)
    }
    fn epoch_unlock(&self, token: String) -> StoreFuture<'_, ()> {
        self.fence().epoch_unlock(token)
    }
    fn set_epoch(
        &self,
        generation: String,
        now: i64,
        token: Option<String>,
        adopt: bool,
        hold_again_until: i64,
    ) -> StoreFuture<'_, bool> {
        let wait = Duration::from_millis(self.set_epoch_ms.load(Ordering::SeqCst));
        StoreFuture::boxed(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let fence = self.fence();
            fence
                .set_epoch(generation, now, token, adopt, hold_again_until)
                .await
        })
    }
}

/// A SQLite ledger whose next `sum` runs a hook first.
struct HookedLedger {
    inner: Arc<SqliteLedger>,
    on_sum: OnceHook,
}

impl std::fmt::Debug for HookedLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookedLedger")
    }
}

impl Ledger for HookedLedger {
    fn record(&self, row: LedgerRow) {
        self.inner.record(row)
    }
    fn record_made(&self, make: RowMaker) {
        self.inner.record_made(make)
    }
    fn flush(&self) -> Result<(), LedgerError> {
        self.inner.flush()
    }
    fn close(&self) -> Result<(), LedgerError> {
        self.inner.close()
    }
    fn sum(&self, filter: &SumFilter, metric: Metric) -> Result<u64, LedgerError> {
        self.on_sum.run();
        self.inner.sum(filter, metric)
    }
    fn query(&self, query: &UsageQuery) -> Result<Vec<UsageGroup>, LedgerError> {
        self.inner.query(query)
    }
    fn pending(&self) -> (usize, u64) {
        self.inner.pending()
    }
    fn record_event(&self, row: AuditRow) {
        self.inner.record_event(row)
    }
    fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRow>, LedgerError> {
        self.inner.audit(query)
    }
}

const POLICY: &str = r#"
[models.gpt-5]
provider = "openai"
max_output_tokens = 1000

[[limits.direct]]
user = "alice"
model = "gpt-5"
rules = [{ metric = "tokens", amount = 1000000, window = "day" }]
"#;

/// Alice's call of 10 prompt tokens and at most 40 out.
fn alices() -> AdmitRequest {
    common::call("alice", "gpt-5", 10, 40)
}

fn eleven() -> Usage {
    Usage {
        input_tokens: 10,
        output_tokens: 1,
        ..Usage::default()
    }
}

#[test]
fn a_call_read_before_a_new_epoch_is_never_counted_twice_by_its_fill() {
    let server = RedisServer::start();
    let store = Arc::new(HookedStore::new(&server));
    store.settles_held.store(true, Ordering::SeqCst);
    let sqlite = Arc::new(SqliteLedger::open(":memory:").unwrap());
    let ledger = Arc::new(HookedLedger {
        inner: sqlite.clone(),
        on_sum: OnceHook::default(),
    });
    let clock = Arc::new(ManualClock::new(at("2026-03-02T10:00:00Z")));
    let guard = Guard::new(policy(POLICY), store.clone(), clock).with_ledger(ledger.clone());
    let guard = Arc::new(guard);

    // Call A fills its counter (no epoch yet), then pauses in its read until let go.
    let (a_paused, a_paused_rx) = mpsc::channel::<()>();
    let (go_a, go_a_rx) = mpsc::channel::<()>();
    store.on_read.set(move || {
        a_paused.send(()).unwrap();
        go_a_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    });
    let (a_billed, a_billed_rx) = mpsc::channel::<()>();
    let a = {
        let guard = guard.clone();
        std::thread::spawn(move || {
            let ticket = guard.admit_blocking(alices()).unwrap();
            // Queued: its settle waits (held back), its ledger row does not.
            let billed = ticket.bill_with_options_blocking(eleven(), BillInfo::default(), false);
            billed.unwrap().unwrap();
            let _ = a_billed.send(()); // B's fill may have stopped waiting
        })
    };
    a_paused_rx.recv_timeout(Duration::from_secs(10)).unwrap();

    // Call B finds no epoch, writes one and fills the counter under it; inside that fill's
    // ledger read, A goes on. Before the fix A reserved under the new epoch unfilled, billed,
    // and the fill then read A's row while A's settle was still on its way: 11 counted twice.
    // Now A reserves under the epoch it read in (fenced) and waits for this fill; the hook
    // stops waiting for A's bill after 2 s.
    let sqlite_in_hook = sqlite.clone();
    ledger.on_sum.set(move || {
        go_a.send(()).unwrap();
        let _ = a_billed_rx.recv_timeout(Duration::from_secs(2));
        sqlite_in_hook.flush().unwrap();
    });
    let b = guard.admit_blocking(alices()).unwrap();
    store.settles_held.store(false, Ordering::SeqCst);
    a.join().unwrap();
    b.bill_blocking(eleven()).unwrap().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    assert!(runtime.block_on(guard.flush(Some(Duration::from_secs(10)))));

    let view = futures::executor::block_on(guard.usage(Some("alice"), "gpt-5")).unwrap();
    let rule = &view.rules[0];
    assert_eq!((rule.used, rule.reserved), (22, 0), "{view:?}");
    guard.close().unwrap();
    let rows = sqlite.query(&UsageQuery::default()).unwrap();
    let tokens: u64 = rows.iter().map(|g| g.input_tokens + g.output_tokens).sum();
    assert_eq!(tokens, 22, "{rows:?}");
}

#[test]
fn a_recovery_goes_on_when_the_call_that_began_it_gives_up() {
    let server = RedisServer::start();
    let store = Arc::new(HookedStore::new(&server));
    store.set_epoch_ms.store(300, Ordering::SeqCst);
    let ledger = Arc::new(SqliteLedger::open(":memory:").unwrap());
    let clock = Arc::new(ManualClock::new(at("2026-03-02T10:00:00Z")));
    let guard = Guard::new(policy(POLICY), store.clone(), clock).with_ledger(ledger);
    let runtime = tokio::runtime::Runtime::new().unwrap();

    // The store has no epoch: the first call takes the recovery lock and writes one, and is
    // given up (dropped) while the write is on its way. Before the fix the lock stayed held
    // for its 10 s: the next calls waited 2 s for an epoch and were refused as recovering.
    let first = runtime.block_on(async {
        tokio::time::timeout(Duration::from_millis(100), guard.admit(alices())).await
    });
    assert!(
        first.is_err(),
        "the first call was to be given up mid-recovery"
    );
    let ticket = runtime
        .block_on(guard.admit(alices()))
        .expect("admitted under the epoch the given-up call's recovery wrote");
    runtime.block_on(ticket.bill(eleven())).unwrap().unwrap();
    assert_eq!(guard.stats().epochs_written.load(Ordering::SeqCst), 1);
    guard.close().unwrap();
}
