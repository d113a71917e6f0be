//! The one tokio runtime of the process, built lazily: stores that talk over the network
//! drive their connections on it, and the Python layer runs its coroutines on it. A forked
//! child builds its own on first use (the parent's worker threads do not exist there).

use std::sync::OnceLock;

use crate::fork::ForkLocal;

/// The runtime of each fork generation: a forked child makes its own, and never waits on the
/// parent's build (a parent thread may have been building it at the fork).
static CURRENT: ForkLocal<OnceLock<tokio::runtime::Runtime>> = ForkLocal::empty();

/// The shared multi-threaded runtime of this process (2 worker threads are plenty: the work
/// is I/O). After a `fork()`, the child's first call builds a new one; the parent's is left
/// untouched in the child's memory (dropping it would wait for threads that are not there).
pub(crate) fn shared() -> &'static tokio::runtime::Runtime {
    CURRENT.get().get_or_init(|| {
        starting_threads(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("usage-guard")
                .on_thread_start(leave_signals_to_other_threads)
                .enable_all()
                .build()
                .expect("the tokio runtime starts")
        })
    })
}

/// Called by every thread the core starts (set once: SIGTERM's flush starts its own thread
/// with the first of them, so a process the core started no thread in stays single-threaded).
static THREAD_STARTED: OnceLock<fn()> = OnceLock::new();

/// Sets what every thread the core starts calls first (the first setting stays).
#[cfg_attr(not(all(unix, feature = "python")), allow(dead_code))]
pub(crate) fn on_thread_start(hook: fn()) {
    let _ = THREAD_STARTED.set(hook);
}

/// The signals a host handles asynchronously, which the core's threads leave to the host's.
#[cfg(unix)]
const HOST_SIGNALS: [libc::c_int; 9] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGCHLD,
    libc::SIGWINCH,
];

/// Adds `HOST_SIGNALS` to this thread's blocked mask and returns the mask it had.
#[cfg(unix)]
fn block_host_signals() -> libc::sigset_t {
    // SAFETY: `set` is initialised by `sigemptyset` before use; `pthread_sigmask` only
    // changes this thread's mask, reads `set` and writes `old`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in HOST_SIGNALS {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    }
}

/// Blocks, in the calling thread, the signals a host handles asynchronously (SIGTERM,
/// SIGINT, SIGHUP, SIGQUIT, SIGUSR1/2, SIGALRM, SIGCHLD, SIGWINCH): every thread the core
/// starts calls it first, so the kernel delivers those signals to the host's threads; then
/// it calls the hook `on_thread_start` set.
///
/// Why: Python runs its signal handlers in the main thread, and learns of a signal there only
/// when the signal interrupts that thread. Delivered to one of our threads instead, a handled
/// SIGTERM or SIGINT leaves a main thread blocked in a C call (a lock, a pipe read) blocked
/// for good: a `multiprocessing.Pool` worker waiting for the task-queue lock never ended
/// when the pool terminated it, and the pool waited for it forever. Faults (SIGSEGV, ...)
/// stay unblocked: they belong to the thread that caused them.
pub(crate) fn leave_signals_to_other_threads() {
    #[cfg(unix)]
    block_host_signals();
    if let Some(started) = THREAD_STARTED.get() {
        started();
    }
}

/// Runs `start` (which starts threads) with the host's signals blocked in the calling
/// thread, then restores its mask: a new thread inherits the blocked mask from its first
/// instruction, where blocking them in its body would leave an instant, after the thread is
/// named and before its body runs, in which the kernel could hand it a SIGTERM meant for the
/// host (and a test reading the thread's mask could see it unblocked).
pub(crate) fn starting_threads<R>(start: impl FnOnce() -> R) -> R {
    #[cfg(unix)]
    let _restore = Restore(block_host_signals());
    start()
}

/// Puts back a thread's signal mask when dropped: after `starting_threads`' start, however
/// it ends (a panic too: the caller may be Python's main thread, which must get its signals
/// back).
#[cfg(unix)]
struct Restore(libc::sigset_t);

#[cfg(unix)]
impl Drop for Restore {
    fn drop(&mut self) {
        // SAFETY: the mask `pthread_sigmask` returned for this thread.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

/// Starts a named thread of the core: its signals blocked from its start
/// (`starting_threads`), it runs the `on_thread_start` hook, then `body`.
#[cfg_attr(
    not(any(
        feature = "sqlite",
        feature = "postgres",
        feature = "gateway",
        feature = "python"
    )),
    allow(dead_code)
)]
pub(crate) fn spawn_thread<T: Send + 'static>(
    name: String,
    body: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<T>> {
    starting_threads(|| {
        std::thread::Builder::new().name(name).spawn(move || {
            leave_signals_to_other_threads();
            body()
        })
    })
}

thread_local! {
    static MAY_BLOCK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While alive, marks this thread as one whose caller may block on a store round trip (a
/// sync call, inside `block_on`): a store may then answer on this thread instead of the
/// shared runtime. Restores the mark it found when dropped.
struct MayBlock(bool);

impl MayBlock {
    fn mark() -> Self {
        MayBlock(MAY_BLOCK.with(|m| m.replace(true)))
    }
}

impl Drop for MayBlock {
    fn drop(&mut self) {
        MAY_BLOCK.with(|m| m.set(self.0));
    }
}

/// Whether this thread's caller may block on a store round trip (it is inside `block_on`).
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn may_block() -> bool {
    MAY_BLOCK.with(std::cell::Cell::get)
}

/// Runs `wait`, a blocking call (a ledger's database), here; on a worker of the shared
/// runtime the wait is announced to tokio, so the other tasks of that worker move on
/// meanwhile.
pub(crate) fn blocking<R>(wait: impl FnOnce() -> R) -> R {
    let on_worker = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if on_worker {
        tokio::task::block_in_place(wait)
    } else {
        wait()
    }
}

/// Runs `work`, CPU-bound (counting a long text), on the blocking pool of the tokio runtime
/// this task runs on, so that runtime's event loop serves its other tasks meanwhile; with
/// no runtime (a synchronous caller) it runs here. A panic in `work` is resumed here.
pub(crate) async fn offload<R: Send + 'static>(work: impl FnOnce() -> R + Send + 'static) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => match starting_threads(|| runtime.spawn_blocking(work)).await {
            Ok(done) => done,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => panic!("the runtime shut down before a blocking task ran"),
        },
        Err(_) => work(),
    }
}

/// Runs a future to completion on this thread. Futures that are ready at once (every
/// in-memory store operation) return from one poll with a no-op waker, skipping the
/// executor's thread parking; others are driven by `futures::executor::block_on`. The thread
/// is marked meanwhile (`may_block`): a store may make its round trips here.
// Inlined: a call moves the future (an admission's is kilobytes) into the callee's frame,
// a `memcpy` on every call; inlined, it is built where it is polled.
#[inline(always)]
pub(crate) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let _marked = MayBlock::mark();
    block_on_here(future)
}

#[inline(always)]
fn block_on_here<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => futures::executor::block_on(future),
    }
}

/// Runs a future that needs no answer: to completion here if it is ready at once (in-memory
/// stores), else on the shared runtime in the background. Safe to call from `Drop`.
pub(crate) fn run_or_spawn<F: std::future::Future<Output = ()> + Send + 'static>(future: F) {
    let mut future = Box::pin(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    if future.as_mut().poll(&mut cx).is_pending() {
        shared().spawn(future);
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn blocked(signal: libc::c_int) -> bool {
        // SAFETY: reads this thread's mask into `now`, initialised by `sigemptyset`.
        unsafe {
            let mut now: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut now);
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
            libc::sigismember(&now, signal) == 1
        }
    }

    #[test]
    fn a_thread_started_meanwhile_has_the_signals_blocked_before_its_body_runs() {
        // A thread of the test harness may have the signal blocked already: start from one
        // that has it unblocked.
        std::thread::spawn(|| {
            // SAFETY: unblocks SIGTERM in this thread only.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGTERM);
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            }
            let plain = std::thread::spawn(|| blocked(libc::SIGTERM))
                .join()
                .unwrap();
            assert!(!plain, "a thread inherits its parent's mask");
            let started = starting_threads(|| std::thread::spawn(|| blocked(libc::SIGTERM)));
            assert!(
                started.join().unwrap(),
                "inherited blocked, nothing in its body"
            );
            assert!(
                !blocked(libc::SIGTERM),
                "the starting thread's mask is restored"
            );
            let panicked = std::panic::catch_unwind(|| starting_threads(|| panic!("no thread")));
            assert!(panicked.is_err());
            assert!(!blocked(libc::SIGTERM), "restored after a panic too");
        })
        .join()
        .unwrap();
    }
}
