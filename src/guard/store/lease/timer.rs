//! The timer of a leasing store: it tells the store the use billed against leases, renews
//! leases that are lost, low or near their expiry, and gives back idle ones; and the give-back
//! of every lease (at `close()` and exit).

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::renew::{renew_now, Renewed};
use super::wait::{wait_for, RENEWAL_WAIT};
use super::Core;
use crate::fork::ForkLocal;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::rule::CounterId;
use crate::lock::Mutex;

/// Every leasing store of this process, for the leases given back at exit.
pub(super) static STORES: Mutex<Vec<Weak<Core>>> = Mutex::new(Vec::new());

/// Held by the give-back at exit under way in this process (per fork generation: a child
/// forked while its parent gave back starts with it free).
static GIVING_BACK: ForkLocal<Mutex<()>> = ForkLocal::empty();

/// How long the give-back at exit waits for `STORES`: a thread holds it for microseconds,
/// but one that held it at a fork holds it for ever in the child.
const STORES_WAIT: Duration = Duration::from_millis(200);

/// Gives back the leases of every leasing store of this process (at exit, after the bills
/// queued for the background settled), waiting at most `limit`; answers how many could not
/// be. Returns at once, with no runtime, when this process holds no lease.
///
/// One at a time in a process: a pool worker that leaves its loop runs its exit flush on the
/// main thread, and `Pool.terminate()`'s SIGTERM then starts the exit thread's; both wait for
/// the same queued bills, so they come here within microseconds of each other. The second
/// waits for the first to end rather than answer "nothing to give back" and end the process
/// (SIGTERM's exit thread; the main thread's `os._exit`) under the first's give-back: before,
/// the one that met `STORES` held by the other answered 0 at once, and the worker's lease
/// stayed held, unlogged, until its expiry (`test_the_children_of_multiprocessing_flush
/// [pool-leased]` in tests_py/exits/test_exits.py: 1 run in about 3 on CI).
pub(crate) fn give_back_everywhere(limit: Duration) -> usize {
    let started = std::time::Instant::now();
    let alone = wait_for_lock(GIVING_BACK.get(), limit);
    let Some(stores) = wait_for_lock(&STORES, STORES_WAIT) else {
        log::error!(
            "at exit: the leasing stores could not be listed; their leases expire on their own"
        );
        return 0;
    };
    let cores: Vec<Arc<Core>> = stores.iter().filter_map(Weak::upgrade).collect();
    drop(stores);
    let cores: Vec<Arc<Core>> = cores
        .into_iter()
        .filter(|core| {
            let book = core.book().lock();
            book.slots.values().any(|s| s.lease.is_some() || s.renewing)
        })
        .collect();
    if cores.is_empty() {
        return 0;
    }
    if alone.is_none() {
        return cores.len(); // the other give-back still runs
    }
    let limit = limit.saturating_sub(started.elapsed());
    let _runtime = crate::runtime::shared().enter();
    let all = async {
        let mut left = 0;
        for core in &cores {
            left += give_back_all(core).await;
        }
        left
    };
    crate::runtime::block_on(async {
        tokio::time::timeout(limit, all)
            .await
            .unwrap_or(cores.len())
    })
}

/// `lock`, held once it is free, waiting at most `limit`; `None` if it was not free by then.
fn wait_for_lock<T>(lock: &Mutex<T>, limit: Duration) -> Option<std::sync::MutexGuard<'_, T>> {
    let started = std::time::Instant::now();
    loop {
        if let Some(held) = lock.try_lock() {
            return Some(held);
        }
        if started.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A lease no call reserved on for this many refreshes is given back.
const IDLE_REFRESHES: Millis = 40;

/// Ends every lease of this process (the timer's `stop` renewal): answers how many could
/// not be given back.
pub(super) async fn give_back_all(core: &Arc<Core>) -> usize {
    let mut failed = usize::from(!super::flush::flush(core, core.now()).await);
    let ids: Vec<Arc<CounterId>> = {
        let book = core.book().lock();
        book.slots
            .iter()
            .filter(|(_, s)| s.lease.is_some() || s.renewing)
            .map(|(id, _)| id.clone())
            .collect()
    };
    for id in ids {
        if !give_back(core, id).await {
            failed += 1;
        }
    }
    failed
}

/// How many renewals in flight a give-back waits out, one after another, at most
/// `RENEWAL_WAIT` each, before it gives up on a lease.
const BUSY_ROUNDS: usize = 30;

/// Gives back the lease of `id` (its part no open call took). A renewal in flight (the
/// timer's, a call's) is waited for and the lease it placed given back after it: answering
/// "not given back" at once would leave that renewal's new slice held until its expiry
/// (`store_leases_give_back.rs` holds the renewal in flight by hand).
async fn give_back(core: &Arc<Core>, id: Arc<CounterId>) -> bool {
    for _ in 0..BUSY_ROUNDS {
        let renewed = core.renewed.notified();
        tokio::pin!(renewed);
        renewed.as_mut().enable();
        match renew_now(core, id.clone(), 0, 0, None, core.now(), true).await {
            Ok(Renewed::Stopped) => return true,
            Ok(Renewed::Busy) => wait_for(renewed, RENEWAL_WAIT).await,
            Ok(Renewed::Granted | Renewed::Fenced(_)) | Err(_) => return false,
        }
    }
    false
}

/// Ends the leases of a store being dropped (its last guard, ticket and renewal gone, with or
/// without `close()`): nothing can take from them any more, and the timer that would have
/// told the store their billed use is gone with the store. Their holds are given back and
/// that use added in the background (the drop may run on any thread, async or not).
pub(super) fn end_dropped(core: &Core) {
    let (leases, stuck) = {
        let mut book = core.book().lock();
        let leases: Vec<_> = book
            .slots
            .values_mut()
            .filter_map(|s| s.lease.take())
            .collect();
        (leases, std::mem::take(&mut book.stuck))
    };
    if leases.is_empty() && stuck.is_empty() {
        return;
    }
    let (inner, now) = (core.inner.clone(), core.now());
    crate::runtime::shared().spawn(async move {
        for step in stuck {
            if let Err(e) = inner.settle_parts(&step, now).await {
                log::error!("usage_guard: a dropped store's lease use was not told ({e})");
            }
        }
        for lease in leases {
            let settle = super::flush::settle_of(&lease, now);
            if let Err(e) = inner.settle(&settle, now).await {
                log::error!(
                    "usage_guard: a dropped store's lease {} was not settled ({e})",
                    lease.id
                );
            }
        }
    });
}

/// Starts this process's timer for `core` once.
pub(super) fn ensure_timer(core: &Arc<Core>) {
    let started = core.timer.get();
    if started.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    let weak = Arc::downgrade(core);
    let every = Duration::from_millis(core.options.refresh_ms as u64);
    crate::runtime::shared().spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(core) = weak.upgrade() else { return };
            tick(&core).await;
        }
    });
}

/// One pass of the timer: tells the store the use billed against leases; renews leases
/// that are lost, low or near their expiry; gives back leases no call used lately and
/// draining ones no call holds.
async fn tick(core: &Arc<Core>) {
    let now = core.now();
    super::flush::flush(core, now).await;
    let (refresh, ttl) = (core.options.refresh_ms, core.options.ttl_ms);
    let due: Vec<(Arc<CounterId>, bool)> = {
        let mut book = core.book().lock();
        book.put_back_expired(now);
        book.slots
            .iter()
            .filter(|(_, s)| !s.renewing)
            .filter_map(|(id, s)| {
                let lease = s.lease.as_ref()?;
                let age = now - lease.renewed_at;
                let idle = lease.taken == 0
                    && (lease.draining || now - s.last_call >= IDLE_REFRESHES * refresh);
                let low = !lease.draining && lease.free() < lease.placed / 4;
                let due = idle || lease.lost || low || age >= ttl / 4;
                due.then(|| (id.clone(), idle))
            })
            .collect()
    };
    for (id, idle) in due {
        if let Err(e) = renew_now(core, id, 0, 0, None, now, idle).await {
            log::warn!("usage_guard: renewing a lease failed: {e}");
        }
    }
}
