//! Noticing `fork()`. A forked child has the parent's memory but only the thread that called
//! `fork`: the runtime's workers, connection tasks, the ledger's writer threads and every other
//! thread are gone, and any lock one of them held at that instant stays held forever in the
//! child. A `pthread_atfork` handler bumps a generation in the child; state that threads share
//! is kept per generation ([`ForkLocal`]), so the child's first use makes its own and never
//! touches (locks, reads, drops) the parent's (gunicorn `--preload`, Celery prefork,
//! `multiprocessing` with fork).
//!
//! What a thread can hold at a fork, and how the child steers clear of it:
//! - runtime: the build lock (`runtime::shared`, a `OnceLock` per generation);
//! - a guard's settle queue: `pending`, the `moved` notify and the registry of queues
//!   (`engine::queue`, per generation; the parent's jobs stay the parent's to settle);
//! - the parent's open tickets: one the child drops (at its exit, with all it inherited)
//!   does not give its holds back (`TicketState`'s drop): they hold the parent's call; and
//!   its bill or release of one is refused (`Ticket::check_process`);
//! - Redis: the connection manager / cluster connection holder (`store::redis::connection`)
//!   and the store checks' state (`store::redis::checks`), per generation;
//! - ledger: the writer handle's `live` slot (per generation; the parent's thread and queue
//!   with its lock and condvars are never touched) and its closed counts (atomics);
//! - a thread parked on a lock in the instant of the fork: every lock and condvar of the
//!   crate is `std`'s (`crate::lock`), which waits on its own futex word. A thread parked in
//!   `parking_lot` leaves its entry in parking_lot's process-wide wait table, in its own
//!   stack's memory, which the child's new threads reuse; the child's next wait or wake in
//!   that bucket, on any lock, followed a corrupt list (the ledger's writer, parked for life,
//!   made 4 to 5 children of 150 die of SIGSEGV when its queue was `parking_lot`'s);
//! - a guard's shared state (`engine::shared`): the policy and listeners (`ArcSwap`: lock-free
//!   reads and writes), the path cache, the known values, the fill maps and per-counter fill
//!   locks, the epoch's recovery lock (per generation, fresh), the epoch generation
//!   (`ArcSwap`), refusal counts and provider health (per generation, copied from the parent's
//!   when its lock was free at the fork), event streams (per generation: a stream made before
//!   the fork reads as ended in the child);
//! - the prompt-count cache (`ceiling::message_cache`, per generation, fresh);
//! - the throttle queues' in-process wake-ups (`engine::wake`, per generation);
//! - pyo3's pool of deferred decrefs (a lock inside pyo3 that every `Python::attach` may
//!   take): the runtime's tasks drop their Python objects with the GIL held, so they never
//!   take it (`py::asyncio`).
//! - CPython's own `HEAD_LOCK` (up to 3.11 the child takes it inside `os.fork()` before
//!   re-creating it, CPython gh-112275): a thread state is made under it without the GIL, so
//!   the runtime's threads keep one thread state for life instead of one per
//!   `Python::attach` (`py::thread_state`).
//!
//! Not covered: an in-memory store's counters and a `QuotaDb` connection (each is the
//! process's own; a child of a parent thread busy in one may block on its lock), a lazily
//! initialised static (tokenizer tables) being built in the instant of the fork, and locks
//! inside libraries that a parent thread held or was parked on in that instant outside the
//! cases above (`tokio-postgres` uses `parking_lot` inside a Postgres ledger's connection;
//! pyo3's decref pool, should some other code drop a Python object without the GIL).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

/// Threads inside a [`Quiet`] section now, and whether a fork waits for them to leave.
static IN_SECTIONS: AtomicUsize = AtomicUsize::new(0);
static FORKING: AtomicBool = AtomicBool::new(false);
/// How long a fork waits for the threads inside sections (then it goes on regardless).
const QUIET_WAIT: Duration = Duration::from_secs(2);

extern "C" fn before_fork() {
    // Atomics and sleeps only: no lock is taken here.
    FORKING.store(true, Ordering::SeqCst);
    let end = Instant::now() + QUIET_WAIT;
    while IN_SECTIONS.load(Ordering::SeqCst) > 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_micros(200));
    }
}

extern "C" fn after_fork_in_parent() {
    FORKING.store(false, Ordering::SeqCst);
}

extern "C" fn after_fork_in_child() {
    // Only atomics: the child may run nothing else that takes a lock here.
    GENERATION.fetch_add(1, Ordering::SeqCst);
    IN_SECTIONS.store(0, Ordering::SeqCst);
    FORKING.store(false, Ordering::SeqCst);
}

/// A stretch of work a fork waits for (at most 2 s), for work inside a library that takes
/// process-wide locks a forked child needs too (SQLite's allocator and file-lock mutexes, held
/// by a ledger's writer thread). A fork in progress holds the section back until it is done.
// Used by the ledgers' writer thread only.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) struct Quiet(());

#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
impl Quiet {
    /// Runs `work` as a section.
    pub(crate) fn run<R>(work: impl FnOnce() -> R) -> R {
        let _quiet = Quiet::enter();
        work()
    }

    /// Enters a section (after any fork in progress).
    pub(crate) fn enter() -> Quiet {
        generation(); // registers the fork handlers
        loop {
            IN_SECTIONS.fetch_add(1, Ordering::SeqCst);
            if !FORKING.load(Ordering::SeqCst) {
                return Quiet(());
            }
            IN_SECTIONS.fetch_sub(1, Ordering::SeqCst);
            while FORKING.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        IN_SECTIONS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// 48 random bits, different in every process: a forked child inherits its parent's random
/// state, so the pid is mixed in with `salt` (a time). Ticket and lease ids start with them.
pub(crate) fn random_bits48(salt: i64) -> u64 {
    use std::hash::BuildHasher;
    let seed = std::collections::hash_map::RandomState::new();
    seed.hash_one((salt, std::process::id())) & 0xffff_ffff_ffff
}

/// The process's fork generation: 0 in the process that first used the crate, +1 in each
/// forked child (and grandchild) since. Registers the fork handler on first use.
pub(crate) fn generation() -> u64 {
    REGISTER.call_once(|| {
        // SAFETY: registers handlers that touch only atomics (and sleep); never unregistered.
        let _ = unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_in_parent),
                Some(after_fork_in_child),
            )
        };
    });
    GENERATION.load(Ordering::SeqCst)
}

struct Tagged<T> {
    generation: u64,
    value: T,
}

/// A value of one fork generation: in a forked child, the first use makes a new one, without
/// touching the parent's (a lock in it may have been held at the fork by a thread that does
/// not exist here). The parent's value is leaked in the child, never dropped.
///
/// Guarantees: `get_or` and `get_with` take no lock and never wait for another thread; every
/// caller in one process gets the same value; a value handed out stays valid while `self`
/// lives.
pub(crate) struct ForkLocal<T> {
    /// Null until first use; else a leaked `Tagged` (freed only by `Drop`, and only when
    /// made in the dropping process).
    current: AtomicPtr<Tagged<T>>,
}

// SAFETY: `ForkLocal` hands out `&T` to any thread and drops `T` in `Drop`: the bounds of
// sharing a `T` itself.
unsafe impl<T: Send + Sync> Send for ForkLocal<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for ForkLocal<T> {}

impl<T> ForkLocal<T> {
    /// Nothing yet: the first use makes the value.
    pub(crate) const fn empty() -> Self {
        ForkLocal {
            current: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// `value`, made in this process.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn new(value: T) -> Self {
        let tagged = Box::new(Tagged {
            generation: generation(),
            value,
        });
        ForkLocal {
            current: AtomicPtr::new(Box::into_raw(tagged)),
        }
    }

    /// This process's value; `fresh` makes it on first use (here, or in a forked child).
    pub(crate) fn get_or(&self, fresh: impl FnOnce() -> T) -> &T {
        self.get_with(|_| fresh())
    }

    /// This process's value; on first use `fresh` makes it, given the value of the process
    /// this one was forked from, if any (to copy what it can without waiting: any lock in it
    /// may be held for ever).
    pub(crate) fn get_with(&self, fresh: impl FnOnce(Option<&T>) -> T) -> &T {
        let generation = generation();
        let seen = self.current.load(Ordering::Acquire);
        // SAFETY: a non-null pointer is a leaked `Tagged`, freed only by `Drop` (`&mut self`).
        if let Some(tagged) = unsafe { seen.as_ref() } {
            if tagged.generation == generation {
                return &tagged.value;
            }
        }
        self.replace(seen, generation, fresh)
    }

    #[cold]
    fn replace(
        &self,
        seen: *mut Tagged<T>,
        generation: u64,
        fresh: impl FnOnce(Option<&T>) -> T,
    ) -> &T {
        // SAFETY: as in `get_with`.
        let stale = unsafe { seen.as_ref() }.map(|t| &t.value);
        let made = Box::into_raw(Box::new(Tagged {
            generation,
            value: fresh(stale),
        }));
        match self
            .current
            .compare_exchange(seen, made, Ordering::AcqRel, Ordering::Acquire)
        {
            // The stale value (if any) is leaked: it may hold a lock taken for ever.
            // SAFETY: `made` is now the stored value, freed only by `Drop`.
            Ok(_) => unsafe { &(*made).value },
            Err(winner) => {
                // Another thread of this process stored its value first (of this generation:
                // only this process's threads replace, each with the current generation).
                // SAFETY: `made` was never shared; `winner` is a leaked `Tagged`, as above.
                unsafe {
                    drop(Box::from_raw(made));
                    &(*winner).value
                }
            }
        }
    }
}

impl<T: Default> ForkLocal<T> {
    /// This process's value, a default one on first use.
    pub(crate) fn get(&self) -> &T {
        self.get_or(T::default)
    }
}

impl<T> Default for ForkLocal<T> {
    fn default() -> Self {
        Self::empty()
    }
}

impl<T> std::fmt::Debug for ForkLocal<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForkLocal").finish_non_exhaustive()
    }
}

impl<T> Drop for ForkLocal<T> {
    fn drop(&mut self) {
        let current = *self.current.get_mut();
        // SAFETY: a leaked `Tagged`; nothing else can reach it now (`&mut self`). One made
        // before a fork is left alone: a lock in it may be held for ever.
        if let Some(tagged) = unsafe { current.as_ref() } {
            if tagged.generation == generation() {
                drop(unsafe { Box::from_raw(current) });
            }
        }
    }
}

/// Test help: runs `child` in a forked child of this process, and returns its exit code, or
/// `None` when it was still running after `deadline` (it is then killed).
#[cfg(test)]
pub(crate) fn in_child(deadline: std::time::Duration, child: impl FnOnce() -> i32) -> Option<i32> {
    // SAFETY: the child runs `child` and leaves by `_exit`, without unwinding or atexit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(101);
        unsafe { libc::_exit(code) };
    }
    let end = std::time::Instant::now() + deadline;
    let mut status = 0;
    loop {
        // SAFETY: waits for the child just forked.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if std::time::Instant::now() >= end {
            // SAFETY: kills and reaps the child just forked.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{in_child, ForkLocal};

    #[test]
    fn a_forked_child_sees_a_new_generation() {
        let before = super::generation();
        let code = in_child(Duration::from_secs(10), || {
            i32::from(super::generation() != before + 1)
        });
        assert_eq!(code, Some(0));
        assert_eq!(
            super::generation(),
            before,
            "the parent keeps its generation"
        );
    }

    /// A lock held for ever by a parent thread at the fork: the child gets a value of its
    /// own (copied from the parent's where the copy needs no lock) and never waits.
    #[test]
    fn a_child_never_touches_a_lock_held_at_the_fork() {
        let local: &'static ForkLocal<(u32, crate::lock::Mutex<u32>)> =
            Box::leak(Box::new(ForkLocal::new((7, crate::lock::Mutex::new(1)))));
        let guard = local.get().1.lock();
        let code = in_child(Duration::from_secs(10), || {
            let value = local.get_with(|parent| (parent.map_or(0, |p| p.0), Default::default()));
            *value.1.lock() += 1;
            let same = std::ptr::eq(value, local.get());
            i32::from(!(value.0 == 7 && *value.1.lock() == 1 && same))
        });
        drop(guard);
        assert_eq!(code, Some(0), "the child hung or saw the wrong value");
        assert_eq!(*local.get().1.lock(), 1, "the parent keeps its value");
    }

    /// A thread inside a `Quiet` section holding a lock a child needs: the fork waits for the
    /// section to end, so the child finds the lock free.
    #[test]
    fn a_fork_waits_for_quiet_sections() {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let (entered_tx, entered) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            super::Quiet::run(|| {
                let _held = LOCK.lock().unwrap_or_else(|e| e.into_inner());
                entered_tx.send(()).expect("the test waits");
                std::thread::sleep(Duration::from_millis(300));
            })
        });
        entered.recv().expect("the worker entered its section");
        let code = in_child(Duration::from_secs(10), || {
            i32::from(LOCK.try_lock().is_err())
        });
        worker.join().expect("the worker ends");
        assert_eq!(code, Some(0), "the child found the lock held");
    }
}
