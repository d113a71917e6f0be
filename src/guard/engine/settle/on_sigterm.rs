//! SIGTERM under the default disposition becomes: flush the bills queued for the background
//! and the ledger rows queued for the writers (within the exit budget), then end by SIGTERM
//! as the default would have (exit status -15, which pools and supervisors read).
//!
//! Why in the core, on a thread of its own: a Python-level handler runs only once the main
//! thread evaluates bytecode again. A main thread asleep in a C wait that goes back to sleep
//! after a wake-up in which a handler ran (glibc's `sem_wait` behind a `multiprocessing`
//! lock, when the wake-up came from the lock) never runs it: a `Pool` worker waiting for the
//! task queue's lock at `Pool.terminate()` never ended, and the pool waited for it forever.
//! The handler here only writes one byte to a pipe (async-signal-safe) and leaves the
//! interrupted call alone (`SA_RESTART`); the exit thread flushes and ends the process.

use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The write end of the pipe the exit thread of process [`OWNER`] reads (-1: none).
static PIPE: AtomicI32 = AtomicI32::new(-1);
/// The process whose exit thread reads [`PIPE`]: a process without one (a forked child
/// before the core starts a thread in it) has nothing queued, and ends at once, as the
/// default would.
static OWNER: AtomicI32 = AtomicI32::new(0);
/// The process whose exit thread was started (or is starting).
static STARTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_sigterm(_signal: libc::c_int) {
    let fd = PIPE.load(Ordering::Acquire);
    // SAFETY: getpid, write and the calls in `end_by_sigterm` are async-signal-safe.
    unsafe {
        if fd < 0 || OWNER.load(Ordering::Acquire) != libc::getpid() {
            end_by_sigterm();
        } else {
            let byte = 1u8;
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
    }
}

/// Restores SIGTERM's default action and sends it to the process: it ends as SIGTERM ends a
/// process (this thread stops blocking it, so that holds even where every other thread
/// blocks it).
unsafe fn end_by_sigterm() {
    let mut default: libc::sigaction = std::mem::zeroed();
    default.sa_sigaction = libc::SIG_DFL;
    libc::sigaction(libc::SIGTERM, &default, std::ptr::null_mut());
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigaddset(&mut set, libc::SIGTERM);
    libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    libc::kill(libc::getpid(), libc::SIGTERM);
}

/// The handler SIGTERM has in the process now.
fn current() -> libc::sighandler_t {
    // SAFETY: a query: `sigaction` with no new action only fills `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut old);
        old.sa_sigaction
    }
}

fn ours() -> libc::sighandler_t {
    on_sigterm as extern "C" fn(libc::c_int) as libc::sighandler_t
}

/// Arms the flush on SIGTERM in this process, in place of the handler SIGTERM has now:
/// called by the Python package where its own Python-level handler was just installed over
/// the default (so that Python's `signal.getsignal` shows a handler a host can chain to), or
/// put back. The exit thread starts with the first thread the core starts (the runtime's, a
/// ledger writer's: nothing can be queued before), so that importing the package leaves a
/// process single-threaded (Python 3.12+ warns at each `fork()` of a multi-threaded one),
/// and again in a forked child, whose parent's exit thread was not forked with it. Returns
/// whether it is armed.
pub(crate) fn arm() -> bool {
    crate::runtime::on_thread_start(start_once);
    if current() == ours() {
        return true;
    }
    // SAFETY: installs a handler that only calls async-signal-safe functions.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = ours();
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut()) == 0
    }
}

/// Starts this process's exit thread unless it was (called at the start of every thread the
/// core starts, the exit thread's own included).
fn start_once() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    if STARTED.swap(pid, Ordering::AcqRel) == pid {
        return;
    }
    let Some(write) = start_exit_thread() else {
        STARTED.store(0, Ordering::Release);
        return;
    };
    let old = PIPE.swap(write, Ordering::AcqRel);
    OWNER.store(pid, Ordering::Release);
    if old >= 0 {
        // SAFETY: the write end inherited from the parent, no longer used in this process.
        unsafe { libc::close(old) };
    }
}

/// Makes the pipe and starts the thread that waits on it; returns the pipe's write end.
fn start_exit_thread() -> Option<i32> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    let [read, write] = fds;
    // The handler's write never blocks (a full pipe already holds a wake-up); the exit
    // thread's read does.
    // SAFETY: sets a flag on a descriptor made above.
    unsafe { libc::fcntl(write, libc::F_SETFL, libc::O_NONBLOCK) };
    let started = crate::runtime::spawn_thread("usage-guard-exit".into(), move || {
        if wait_for_signal(read) {
            flush_then_end();
        }
    });
    match started {
        Ok(_) => Some(write),
        Err(e) => {
            log::error!("the SIGTERM flush cannot start its thread: {e}");
            // SAFETY: both ends were made above and are not used elsewhere.
            unsafe {
                libc::close(read);
                libc::close(write);
            }
            None
        }
    }
}

/// Blocks until the handler writes a byte (true) or the pipe fails (false).
fn wait_for_signal(read: i32) -> bool {
    let mut byte = 0u8;
    loop {
        // SAFETY: reads at most one byte into `byte`.
        let n = unsafe { libc::read(read, (&mut byte as *mut u8).cast(), 1) };
        if n == 1 {
            return true;
        }
        if n == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
    }
}

/// How long SIGTERM waits for the bills queued for the background, retries included, and
/// then for the ledger rows (the Python package's exit budget, `EXIT_BUDGET_S`).
const EXIT_BUDGET: Duration = Duration::from_secs(5);

fn flush_then_end() {
    let left = super::settle_queue::flush_all_and_leases_blocking(EXIT_BUDGET);
    if left > 0 {
        log::error!(
            "at SIGTERM: {left} queued or retried bills were not settled within {} s",
            EXIT_BUDGET.as_secs()
        );
    }
    for error in crate::guard::ledger::flush_all(EXIT_BUDGET) {
        log::error!("at SIGTERM: {error}");
    }
    // SAFETY: ends the process.
    unsafe { end_by_sigterm() };
}
