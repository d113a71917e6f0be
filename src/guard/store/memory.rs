//! The in-memory store: one process, one lock, so checking and holding several counters is
//! one atomic step. Counters past their retention are swept as time passes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use parking_lot::Mutex;

use super::{
    hold_is_live, CounterKey, CounterRead, CounterStore, HoldRef, ReserveItem, ReserveOutcome,
    StoreFuture, UsageAdd,
};
use crate::guard::domain::clock::Millis;

const SWEEP_EVERY_MS: i64 = 60_000;

#[derive(Debug, Default)]
struct Cell {
    used: u64,
    /// Filled from the ledger.
    filled: bool,
    /// (expiry minute, amount held), few entries: one per minute with calls in flight.
    holds: Vec<(i64, u64)>,
    retain_until: Millis,
}

impl Cell {
    fn held(&mut self, now: Millis) -> u64 {
        self.holds
            .retain(|&(minute, amount)| amount > 0 && hold_is_live(minute, now));
        self.holds
            .iter()
            .fold(0u64, |sum, &(_, amount)| sum.saturating_add(amount))
    }

    fn keep_until(&mut self, until: Millis) {
        self.retain_until = self.retain_until.max(until);
    }
}

/// Counter keys hash as (precomputed id hash, bucket): mixing two words is enough.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_i64(&mut self, word: i64) {
        self.write_u64(word as u64);
    }
}

#[derive(Debug, Default)]
struct Inner {
    cells: HashMap<CounterKey, Cell, BuildHasherDefault<KeyHasher>>,
    /// `mark_once` marks and when they may go.
    marks: HashMap<String, Millis>,
    next_sweep: Millis,
}

impl Inner {
    fn sweep(&mut self, now: Millis) {
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + SWEEP_EVERY_MS;
        self.cells
            .retain(|_, cell| cell.retain_until > now || cell.held(now) > 0);
        self.marks.retain(|_, until| *until > now);
    }

    /// The cell of `key` if it is still kept at `now`.
    fn live_cell(&mut self, key: &CounterKey, now: Millis) -> Option<&mut Cell> {
        let cell = self.cells.get_mut(key)?;
        let live = cell.retain_until > now || cell.held(now) > 0;
        live.then_some(cell)
    }
}

/// Counters in this process's memory. Safe from many threads; every method is one critical
/// section.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many counters the store holds now (for tests of retention).
    pub fn len(&self) -> usize {
        self.inner.lock().cells.len()
    }

    /// Whether the store holds no counter.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads counters synchronously, under one lock.
    pub fn read_now(&self, keys: &[CounterKey], now: Millis) -> Vec<CounterRead> {
        let mut inner = self.inner.lock();
        keys.iter()
            .map(|key| match inner.cells.get_mut(key) {
                Some(cell) => CounterRead {
                    used: cell.used,
                    held: cell.held(now),
                },
                None => CounterRead::default(),
            })
            .collect()
    }

    fn reserve_now(
        &self,
        items: &[ReserveItem],
        expiry_minute: i64,
        now: Millis,
    ) -> ReserveOutcome {
        let mut inner = self.inner.lock();
        inner.sweep(now);
        for (i, item) in items.iter().enumerate() {
            let Some(limit) = item.limit else { continue };
            let counted = match inner.cells.get_mut(&item.key) {
                Some(cell) => cell.used.saturating_add(cell.held(now)),
                None => 0,
            }
            .saturating_add(item.carried);
            if counted >= limit || counted.saturating_add(item.hold) > limit {
                return ReserveOutcome::Conflict { item: i };
            }
        }
        let hold_until = expiry_minute * 60_000;
        for item in items {
            let cell = inner.cells.entry(item.key.clone()).or_default();
            cell.keep_until(item.retain_until.max(hold_until));
            if item.hold == 0 {
                continue;
            }
            match cell.holds.iter_mut().find(|(m, _)| *m == expiry_minute) {
                Some((_, amount)) => *amount = amount.saturating_add(item.hold),
                None => cell.holds.push((expiry_minute, item.hold)),
            }
        }
        ReserveOutcome::Reserved
    }

    fn settle_now(&self, holds: &[HoldRef], expiry_minute: i64, adds: &[UsageAdd], now: Millis) {
        let mut inner = self.inner.lock();
        inner.sweep(now);
        for hold in holds {
            if let Some(cell) = inner.cells.get_mut(&hold.key) {
                if let Some(pos) = cell.holds.iter().position(|(m, _)| *m == expiry_minute) {
                    let entry = &mut cell.holds[pos].1;
                    *entry = entry.saturating_sub(hold.amount);
                    if *entry == 0 {
                        cell.holds.swap_remove(pos);
                    }
                }
            }
        }
        for add in adds {
            let cell = inner.cells.entry(add.key.clone()).or_default();
            cell.used = cell.used.saturating_add(add.amount);
            cell.keep_until(add.retain_until);
        }
    }
}

impl MemoryStore {
    /// `filled`, synchronously.
    pub fn filled_now(&self, keys: &[CounterKey], now: Millis) -> Vec<bool> {
        let mut inner = self.inner.lock();
        keys.iter()
            .map(|k| inner.live_cell(k, now).is_some_and(|c| c.filled))
            .collect()
    }

    /// `fill`, synchronously.
    pub fn fill_now(
        &self,
        key: &CounterKey,
        ledger_used: u64,
        retain_until: Millis,
        now: Millis,
    ) -> bool {
        let mut inner = self.inner.lock();
        inner.sweep(now);
        if inner.live_cell(key, now).is_none() {
            inner.cells.remove(key);
        }
        let cell = inner.cells.entry(key.clone()).or_default();
        if cell.filled {
            return false;
        }
        cell.filled = true;
        cell.used = cell.used.max(ledger_used);
        cell.keep_until(retain_until);
        true
    }

    /// `mark_once`, synchronously.
    pub fn mark_once_now(&self, mark: &str, keep_until: Millis, now: Millis) -> bool {
        let mut inner = self.inner.lock();
        inner.sweep(now);
        match inner.marks.get_mut(mark) {
            Some(until) if *until > now => false,
            _ => {
                inner.marks.insert(mark.to_string(), keep_until);
                true
            }
        }
    }
}

impl CounterStore for MemoryStore {
    fn read(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<CounterRead>> {
        Box::pin(std::future::ready(Ok(self.read_now(&keys, now))))
    }

    fn reserve(
        &self,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
    ) -> StoreFuture<'_, ReserveOutcome> {
        let outcome = self.reserve_now(&items, expiry_minute, now);
        Box::pin(std::future::ready(Ok(outcome)))
    }

    fn settle(
        &self,
        holds: Vec<HoldRef>,
        expiry_minute: i64,
        adds: Vec<UsageAdd>,
        now: Millis,
    ) -> StoreFuture<'_, ()> {
        self.settle_now(&holds, expiry_minute, &adds, now);
        Box::pin(std::future::ready(Ok(())))
    }

    fn filled(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<bool>> {
        Box::pin(std::future::ready(Ok(self.filled_now(&keys, now))))
    }

    fn fill(
        &self,
        key: CounterKey,
        ledger_used: u64,
        retain_until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, bool> {
        let filled = self.fill_now(&key, ledger_used, retain_until, now);
        Box::pin(std::future::ready(Ok(filled)))
    }

    fn mark_once(&self, mark: String, keep_until: Millis, now: Millis) -> StoreFuture<'_, bool> {
        let set = self.mark_once_now(&mark, keep_until, now);
        Box::pin(std::future::ready(Ok(set)))
    }
}
