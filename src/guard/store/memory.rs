//! The in-memory store: one process, one lock, so checking and holding several counters is
//! one atomic step. Counters past their retention, expired holds and expired ticket records
//! are swept as time passes.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use crate::lock::Mutex;

use super::memory_tickets::{KeyHasher, Record, TicketRecords};
use super::memory_wait_queues::MemoryQueues;
use super::{
    hold_is_live, CounterKey, CounterRead, CounterStore, HoldRef, PartsSettle, ReserveItem,
    ReserveOutcome, Settle, SettleOutcome, StoreFuture, UsageAdd, WaitQueues,
};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::rule::CounterId;

const SWEEP_EVERY_MS: i64 = 60_000;

#[derive(Debug, Default)]
struct Cell {
    used: u64,
    /// Filled from the ledger.
    filled: bool,
    retain_until: Millis,
}

impl Cell {
    fn keep_until(&mut self, until: Millis) {
        self.retain_until = self.retain_until.max(until);
    }
}

/// A counter's holds: (expiry minute, amount held), few entries: one per minute with calls
/// in flight.
#[derive(Debug, Default)]
struct Holds(Vec<(i64, u64)>);

impl Holds {
    fn held(&mut self, now: Millis) -> u64 {
        self.0
            .retain(|&(minute, amount)| amount > 0 && hold_is_live(minute, now));
        self.0
            .iter()
            .fold(0u64, |sum, &(_, amount)| sum.saturating_add(amount))
    }
}

#[derive(Debug, Default)]
struct Inner {
    cells: HashMap<CounterKey, Cell, BuildHasherDefault<KeyHasher>>,
    holds: HashMap<Arc<CounterId>, Holds, BuildHasherDefault<KeyHasher>>,
    /// What is known of each ticket id.
    tickets: TicketRecords,
    /// `mark_once` marks and when they may go.
    marks: HashMap<String, Millis>,
    /// Batch part records (billed, or only given back) and when they may go.
    parts: HashMap<String, (bool, Millis)>,
    /// `raise_until` notes: (until, note).
    notes: HashMap<String, (Millis, String)>,
    next_sweep: Millis,
}

impl Inner {
    fn sweep(&mut self, now: Millis) {
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + SWEEP_EVERY_MS;
        self.cells.retain(|_, cell| cell.retain_until > now);
        self.holds.retain(|_, holds| holds.held(now) > 0);
        self.tickets.sweep(now);
        self.marks.retain(|_, until| *until > now);
        self.parts.retain(|_, (_, until)| *until > now);
        self.notes.retain(|_, (until, _)| *until > now);
    }

    /// The cell of `key` if it is still kept at `now`.
    fn live_cell(&mut self, key: &CounterKey, now: Millis) -> Option<&mut Cell> {
        let cell = self.cells.get_mut(key)?;
        (cell.retain_until > now).then_some(cell)
    }

    fn used(&mut self, key: &CounterKey, now: Millis) -> u64 {
        self.live_cell(key, now).map_or(0, |cell| cell.used)
    }

    fn held(&mut self, id: &CounterId, now: Millis) -> u64 {
        self.holds.get_mut(id).map_or(0, |holds| holds.held(now))
    }

    fn give_back(&mut self, holds: &[HoldRef], expiry_minute: i64) {
        for hold in holds {
            let Some(entries) = self.holds.get_mut(&hold.key.id) else {
                continue;
            };
            if let Some(pos) = entries.0.iter().position(|(m, _)| *m == expiry_minute) {
                let entry = &mut entries.0[pos].1;
                *entry = entry.saturating_sub(hold.amount);
                if *entry == 0 {
                    entries.0.swap_remove(pos);
                }
            }
        }
    }

    fn add(&mut self, adds: &[UsageAdd], now: Millis) {
        for add in adds {
            if self.live_cell(&add.key, now).is_none() {
                self.cells.remove(&add.key);
            }
            let cell = self.cells.entry(add.key.clone()).or_default();
            cell.used = cell.used.saturating_add(add.amount);
            cell.keep_until(add.retain_until);
        }
    }
}

/// Counters in this process's memory. Safe from many threads; every method is one critical
/// section.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
    queues: MemoryQueues,
    outage: super::OutageLog,
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
        let mut out: Vec<CounterRead> = Vec::with_capacity(keys.len());
        for (i, key) in keys.iter().enumerate() {
            // A counter read in two buckets (a sliding window's previous one) has one set of
            // holds: looked up once.
            let held = match keys[..i].iter().position(|k| Arc::ptr_eq(&k.id, &key.id)) {
                Some(j) => out[j].held,
                None => inner.held(&key.id, now),
            };
            out.push(CounterRead {
                used: inner.used(key, now),
                held,
            });
        }
        out
    }

    fn reserve_now(
        &self,
        ticket: String,
        items: &[ReserveItem],
        expiry_minute: i64,
        now: Millis,
    ) -> ReserveOutcome {
        let mut inner = self.inner.lock();
        inner.sweep(now);
        match inner.tickets.record(&ticket, now) {
            Some(Record::Held) => return ReserveOutcome::Reserved,
            Some(Record::Settled { .. }) => return ReserveOutcome::Settled,
            None => {}
        }
        for (i, item) in items.iter().enumerate() {
            let Some(limit) = item.limit else { continue };
            let counted = inner
                .used(&item.key, now)
                .saturating_add(inner.held(&item.key.id, now))
                .saturating_add(item.carried);
            if counted >= limit || counted.saturating_add(item.hold) > limit {
                return ReserveOutcome::Conflict { item: i };
            }
        }
        for item in items.iter().filter(|i| i.hold > 0) {
            let holds = &mut inner.holds.entry(item.key.id.clone()).or_default().0;
            match holds.iter_mut().find(|(m, _)| *m == expiry_minute) {
                Some((_, amount)) => *amount = amount.saturating_add(item.hold),
                None => holds.push((expiry_minute, item.hold)),
            }
        }
        inner.tickets.held(ticket, expiry_minute * 60_000);
        ReserveOutcome::Reserved
    }

    fn settle_now(&self, settle: &Settle, now: Millis) -> SettleOutcome {
        let mut inner = self.inner.lock();
        inner.sweep(now);
        let whole = settle.is_whole();
        let mark = inner.tickets.record(&settle.id, now);
        let landed = match (whole, mark) {
            (true, Some(Record::Held)) => true,
            (_, Some(_)) => return SettleOutcome::AlreadySettled,
            (true, None) => false,
            (false, None) => inner.tickets.landed(&settle.ticket, now),
        };
        if landed {
            inner.give_back(&settle.holds, settle.expiry_minute);
        }
        inner.add(&settle.adds, now);
        let mut until = settle.settled_until.max(now + 1);
        if whole && !landed {
            until = until.max(settle.expiry_minute * 60_000);
        }
        inner.tickets.settled(&settle.id, whole, landed, until);
        SettleOutcome::Settled
    }
}

impl MemoryStore {
    /// `settle_parts`, synchronously, under one lock.
    pub fn settle_parts_now(&self, settle: &PartsSettle, now: Millis) -> Vec<SettleOutcome> {
        let mut inner = self.inner.lock();
        inner.sweep(now);
        let landed = inner.tickets.landed(&settle.ticket, now);
        let until = settle.settled_until.max(now + 1);
        let mut out = Vec::with_capacity(settle.parts.len());
        for part in &settle.parts {
            let billed = inner
                .parts
                .get(&part.id)
                .filter(|(_, until)| *until > now)
                .map(|(billed, _)| *billed);
            let give = billed.is_none();
            let add = part.bill && billed != Some(true);
            if give && landed {
                inner.give_back(&part.holds, settle.expiry_minute);
            }
            if add {
                inner.add(&part.adds, now);
            }
            if give || add {
                inner.parts.insert(part.id.clone(), (add, until));
                out.push(SettleOutcome::Settled);
            } else {
                out.push(SettleOutcome::AlreadySettled);
            }
        }
        out
    }

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

impl MemoryStore {
    /// `raise_until`, synchronously.
    pub fn raise_until_now(&self, key: &str, until: Millis, note: &str, now: Millis) {
        let mut inner = self.inner.lock();
        inner.sweep(now);
        match inner.notes.get(key) {
            Some((kept, _)) if *kept > now && *kept > until => {}
            _ => {
                inner
                    .notes
                    .insert(key.to_string(), (until, note.to_string()));
            }
        }
    }

    /// `read_until`, synchronously.
    pub fn read_until_now(&self, keys: &[String], now: Millis) -> Vec<Option<(Millis, String)>> {
        let inner = self.inner.lock();
        keys.iter()
            .map(|k| inner.notes.get(k).filter(|(u, _)| *u > now).cloned())
            .collect()
    }
}

impl CounterStore for MemoryStore {
    fn queues(&self) -> Option<&dyn WaitQueues> {
        Some(&self.queues)
    }

    fn outage(&self) -> &super::OutageLog {
        &self.outage
    }

    fn read(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<CounterRead>> {
        StoreFuture::ready(Ok(self.read_now(&keys, now)))
    }

    fn reserve(
        &self,
        ticket: String,
        items: Vec<ReserveItem>,
        expiry_minute: i64,
        now: Millis,
    ) -> StoreFuture<'_, ReserveOutcome> {
        let outcome = self.reserve_now(ticket, &items, expiry_minute, now);
        StoreFuture::ready(Ok(outcome))
    }

    fn settle(&self, settle: &Settle, now: Millis) -> StoreFuture<'_, SettleOutcome> {
        let outcome = self.settle_now(settle, now);
        StoreFuture::ready(Ok(outcome))
    }

    fn settle_parts(
        &self,
        settle: &PartsSettle,
        now: Millis,
    ) -> StoreFuture<'_, Vec<SettleOutcome>> {
        StoreFuture::ready(Ok(self.settle_parts_now(settle, now)))
    }

    fn filled(&self, keys: Vec<CounterKey>, now: Millis) -> StoreFuture<'_, Vec<bool>> {
        StoreFuture::ready(Ok(self.filled_now(&keys, now)))
    }

    fn fill(
        &self,
        key: CounterKey,
        ledger_used: u64,
        retain_until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, bool> {
        let filled = self.fill_now(&key, ledger_used, retain_until, now);
        StoreFuture::ready(Ok(filled))
    }

    fn mark_once(&self, mark: String, keep_until: Millis, now: Millis) -> StoreFuture<'_, bool> {
        let set = self.mark_once_now(&mark, keep_until, now);
        StoreFuture::ready(Ok(set))
    }

    fn raise_until(
        &self,
        key: String,
        until: Millis,
        note: String,
        now: Millis,
    ) -> StoreFuture<'_, ()> {
        self.raise_until_now(&key, until, &note, now);
        StoreFuture::ready(Ok(()))
    }

    fn read_until(
        &self,
        keys: Vec<String>,
        now: Millis,
    ) -> StoreFuture<'_, Vec<Option<(Millis, String)>>> {
        StoreFuture::ready(Ok(self.read_until_now(&keys, now)))
    }
}
