//! The last known values of counters, from this guard's reads and reserve answers, with the
//! time they were read: admission on a store across a network decides from them, however old,
//! and reserves at once (docs/redis-internals.md, "One round trip to admit"). Correctness never
//! rests on them: the store checks every condition the decision rested on and answers the
//! values it found, and a refusal or a lowered ceiling is only ever decided from values read
//! (or answered) in the same admission. Old values cost a retry only where the counters moved
//! under them: near a limit, where a read first would have cost the same round trip.

use std::collections::HashMap;

use crate::lock::Mutex;

use crate::fork::ForkLocal;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{CounterKey, CounterRead};

/// At most this many keys are kept (all forgotten when reached; they refill at the next read).
const KNOWN_MAX: usize = 100_000;

/// Known counter values by key, each with the time it was read.
#[derive(Debug, Default)]
pub(crate) struct Known {
    /// This process's values (a forked child starts with none).
    values: ForkLocal<Mutex<HashMap<CounterKey, (CounterRead, Millis)>>>,
}

impl Known {
    /// The values of every key of `keys`, if each is known from a time at or before `now` (a
    /// clock set back makes later values unknown until they are read again).
    pub(crate) fn get(&self, keys: &[CounterKey], now: Millis) -> Option<Vec<CounterRead>> {
        let values = self.values.get().lock();
        keys.iter()
            .map(|k| {
                values
                    .get(k)
                    .filter(|(_, at)| *at <= now)
                    .map(|(read, _)| *read)
            })
            .collect()
    }

    /// Remembers `reads` of `keys`, read at `now`.
    pub(crate) fn remember(&self, keys: &[CounterKey], reads: &[CounterRead], now: Millis) {
        let mut values = self.values.get().lock();
        if values.len() + keys.len() > KNOWN_MAX {
            values.clear();
        }
        for (key, read) in keys.iter().zip(reads) {
            values.insert(key.clone(), (*read, now));
        }
    }

    /// Forgets every value (the store's epoch moved: counters may have been refilled).
    pub(crate) fn forget_all(&self) {
        self.values.get().lock().clear();
    }
}
