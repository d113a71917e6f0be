//! The crate's one mutex and condvar: `std`'s, without poisoning.
//!
//! Not `parking_lot`'s, for `fork()` (src/fork.rs): a thread parked on a contended
//! `parking_lot` lock keeps its entry in parking_lot's process-wide wait table, in memory of
//! its own stack. A child forked in that instant inherits the table but not the thread, and
//! glibc gives the stack to the child's next thread; the child's next wait or wake in that
//! bucket of the table (on any lock, its own fresh ones included) then follows a corrupt list.
//! `std`'s mutex waits on its own futex word and leaves nothing behind.

use std::sync::{MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

/// A mutual-exclusion lock. A panic while it is held does not poison it: the data is as the
/// panicking code left it, as with `parking_lot` (every critical section in the crate leaves
/// its data whole between statements).
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(std::sync::Mutex<T>);

impl<T> Mutex<T> {
    /// A new unlocked mutex holding `value`.
    pub(crate) const fn new(value: T) -> Self {
        Self(std::sync::Mutex::new(value))
    }

    /// Waits for the lock and holds it until the guard is dropped.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The data, through the one reference there is: no lock is taken (so it is safe where
    /// another thread may have held the lock at a `fork()`).
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds the lock if it is free now; `None` if another thread holds it.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// A condition variable for [`Mutex`]'s guards; like the mutex, it ignores poisoning.
#[derive(Debug, Default)]
pub(crate) struct Condvar(std::sync::Condvar);

// The users are the ledger's queue (`sqlite`, `postgres`) and the gateway's stop wait: what
// a build without them leaves unused is allowed to be.
impl Condvar {
    /// Gives the lock up until notified (or woken spuriously), then holds it again.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    /// `wait` for at most `limit`; the guard, and whether the wait timed out.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn wait_at_most<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        limit: Duration,
    ) -> (MutexGuard<'a, T>, bool) {
        let (guard, result) = self
            .0
            .wait_timeout(guard, limit)
            .unwrap_or_else(PoisonError::into_inner);
        (guard, result.timed_out())
    }

    /// Waits while `condition` holds, for at most `limit` (forever with `None`); the guard,
    /// and whether it still holds (the wait timed out).
    #[cfg_attr(not(feature = "gateway"), allow(dead_code))]
    pub(crate) fn wait_while<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        limit: Option<Duration>,
        condition: impl FnMut(&mut T) -> bool,
    ) -> (MutexGuard<'a, T>, bool) {
        match limit {
            None => {
                let guard = self
                    .0
                    .wait_while(guard, condition)
                    .unwrap_or_else(PoisonError::into_inner);
                (guard, false)
            }
            Some(limit) => {
                let (guard, result) = self
                    .0
                    .wait_timeout_while(guard, limit, condition)
                    .unwrap_or_else(PoisonError::into_inner);
                (guard, result.timed_out())
            }
        }
    }

    /// Wakes one waiting thread.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    pub(crate) fn notify_one(&self) {
        self.0.notify_one();
    }

    /// Wakes every waiting thread.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres", feature = "gateway")),
        allow(dead_code)
    )]
    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::{Condvar, Mutex};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_panic_while_held_does_not_poison_the_lock() {
        let lock = std::sync::Arc::new(Mutex::new(1));
        let held = lock.clone();
        let panicked = std::thread::spawn(move || {
            let mut value = held.lock();
            *value = 2;
            panic!("while holding the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert_eq!(*lock.lock(), 2);
        assert_eq!(lock.try_lock().map(|v| *v), Some(2));
    }

    #[test]
    fn try_lock_is_none_while_another_holds_it() {
        let lock = Mutex::new(());
        let held = lock.lock();
        assert!(lock.try_lock().is_none());
        drop(held);
        assert!(lock.try_lock().is_some());
    }

    #[test]
    fn a_condvar_wait_survives_a_panic_in_another_holder() {
        let pair = Arc::new((Mutex::new(false), Condvar::default()));
        let other = pair.clone();
        let panicked = std::thread::spawn(move || {
            let mut ready = other.0.lock();
            *ready = true;
            other.1.notify_all();
            panic!("while holding the lock");
        });
        let (lock, changed) = &*pair;
        let (ready, timed_out) =
            changed.wait_while(lock.lock(), Some(Duration::from_secs(30)), |r| !*r);
        assert!(*ready && !timed_out);
        drop(ready);
        assert!(panicked.join().is_err());
        let (held, timed_out) = changed.wait_at_most(lock.lock(), Duration::from_millis(1));
        assert!(timed_out);
        drop(held);
        let (held, still) =
            changed.wait_while(lock.lock(), Some(Duration::from_millis(1)), |_| true);
        assert!(still && *held);
    }
}
