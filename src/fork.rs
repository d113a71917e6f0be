//! Noticing `fork()`. A forked child has the parent's memory but only the thread that called
//! `fork`: the runtime's workers, connection tasks and the ledger's writer thread are gone.
//! A `pthread_atfork` handler bumps a generation in the child; whatever owns threads or
//! connections compares it with the generation it was made in and starts afresh when they
//! differ (gunicorn `--preload`, Celery prefork, `multiprocessing` with fork).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

extern "C" fn after_fork_in_child() {
    // Only an atomic add: the child may run nothing else that takes a lock here.
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// The process's fork generation: 0 in the process that first used the crate, +1 in each
/// forked child (and grandchild) since. Registers the fork handler on first use.
pub(crate) fn generation() -> u64 {
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic; it is never unregistered.
        let _ = unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
    GENERATION.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_forked_child_sees_a_new_generation() {
        let before = super::generation();
        // SAFETY: the child only reads an atomic and exits without unwinding.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = if super::generation() == before + 1 {
                0
            } else {
                1
            };
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(
            super::generation(),
            before,
            "the parent keeps its generation"
        );
    }
}
