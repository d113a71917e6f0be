//! The crate's one mutex: `std`'s, without poisoning.
//!
//! Not `parking_lot`'s, for `fork()` (src/fork.rs): a thread parked on a contended
//! `parking_lot` lock keeps its entry in parking_lot's process-wide wait table, in memory of
//! its own stack. A child forked in that instant inherits the table but not the thread, and
//! glibc gives the stack to the child's next thread; the child's next wait or wake in that
//! bucket of the table (on any lock, its own fresh ones included) then follows a corrupt list.
//! `std`'s mutex waits on its own futex word and leaves nothing behind.

use std::sync::{MutexGuard, PoisonError, TryLockError};

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

    /// Holds the lock if it is free now; `None` if another thread holds it.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Mutex;

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
}
