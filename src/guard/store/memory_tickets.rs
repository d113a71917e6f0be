//! What the in-memory store knows of each ticket id: a reservation in flight, or a settle
//! (so that a second settle of the id, or a reservation after it, does nothing).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::guard::domain::clock::Millis;

/// How many settled calls one generation of `TicketRecords::settled` keeps (two are kept).
pub(super) const SETTLED_GENERATION: usize = 8192;

/// What is known of a ticket id: its reservation landed (and is not settled), or it settled
/// (after its reservation landed, or without one), kept until `until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Record {
    Held,
    Settled { landed: bool },
}

/// Counter keys hash as (precomputed id hash, bucket): mixing two words is enough. Ticket
/// ids are made by this process (or its tests), not by an adversary, so a multiply-rotate
/// mix of their bytes is enough too, and far cheaper than SipHash on the hot path.
#[derive(Default)]
pub(super) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Ticket ids and marks: eight bytes a round, the tail zero-padded (`str` hashing
        // appends a 0xff terminator, so ids of different lengths stay apart).
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
        let tail = chunks.remainder();
        if !tail.is_empty() {
            let mut word = [0u8; 8];
            word[..tail.len()].copy_from_slice(tail);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.write_u64(u64::from(byte));
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_i64(&mut self, word: i64) {
        self.write_u64(word as u64);
    }
}

type SettledMarks = HashMap<String, Millis, BuildHasherDefault<KeyHasher>>;

/// Ticket records, each kept until a time.
#[derive(Debug, Default)]
pub(super) struct TicketRecords {
    /// Reservations in flight, settled parts, and whole tickets settled without their
    /// reservation landing (kept until their holds would expire, so a late reservation places
    /// nothing).
    records: HashMap<String, (Record, Millis), BuildHasherDefault<KeyHasher>>,
    /// Whole tickets settled after their reservation landed, in two generations of at most
    /// `SETTLED_GENERATION` (the newer first). A settle on this store always answers, so
    /// nothing retries an old one: the marks of a busy process stay few and in cache instead
    /// of growing with five minutes of calls.
    settled: [SettledMarks; 2],
}

impl TicketRecords {
    /// Forgets every record past its time.
    pub(super) fn sweep(&mut self, now: Millis) {
        self.records.retain(|_, (_, until)| *until > now);
        for marks in &mut self.settled {
            marks.retain(|_, until| *until > now);
        }
    }

    /// The record of ticket `id` if it is still kept at `now`.
    pub(super) fn record(&self, id: &str, now: Millis) -> Option<Record> {
        if let Some((record, until)) = self.records.get(id) {
            return (*until > now).then_some(*record);
        }
        self.settled
            .iter()
            .find_map(|marks| marks.get(id))
            .filter(|until| **until > now)
            .map(|_| Record::Settled { landed: true })
    }

    /// Whether the reservation of `ticket` landed (it is held, or settled after landing).
    pub(super) fn landed(&self, ticket: &str, now: Millis) -> bool {
        self.record(ticket, now)
            .is_some_and(|r| matches!(r, Record::Held | Record::Settled { landed: true }))
    }

    /// Records that the reservation of `id` landed, kept until `until`.
    pub(super) fn held(&mut self, id: String, until: Millis) {
        self.records.insert(id, (Record::Held, until));
    }

    /// Records that `id` settled (a whole ticket or a part), kept until `until`. A landed
    /// whole ticket moves into the newer generation of settled marks, turning the
    /// generations over when it is full.
    pub(super) fn settled(&mut self, id: &str, whole: bool, landed: bool, until: Millis) {
        if !(whole && landed) {
            self.records
                .insert(id.to_string(), (Record::Settled { landed }, until));
            return;
        }
        let key = match self.records.remove_entry(id) {
            Some((key, _)) => key,
            None => id.to_string(),
        };
        if self.settled[0].len() >= SETTLED_GENERATION {
            self.settled.swap(0, 1);
            self.settled[0].clear();
        }
        self.settled[0].insert(key, until);
    }

    /// How many records are kept (every kind).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.records.len() + self.settled.iter().map(HashMap::len).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settled_marks_stay_bounded_and_recent_ones_are_kept() {
        let mut records = TicketRecords::default();
        let calls = 5 * SETTLED_GENERATION;
        for n in 0..calls {
            let id = format!("t-{n:x}");
            records.held(id.clone(), 1_000);
            assert_eq!(records.record(&id, 0), Some(Record::Held));
            records.settled(&id, true, true, 500);
            assert_eq!(
                records.record(&id, 0),
                Some(Record::Settled { landed: true })
            );
            assert!(records.len() <= 2 * SETTLED_GENERATION, "{}", records.len());
        }
        let recent = format!("t-{:x}", calls - SETTLED_GENERATION);
        assert_eq!(
            records.record(&recent, 0),
            Some(Record::Settled { landed: true })
        );
        assert_eq!(records.record(&recent, 500), None, "past its time");
    }

    #[test]
    fn unlanded_and_part_settles_keep_their_own_time() {
        let mut records = TicketRecords::default();
        records.settled("never-landed", true, false, 900_000);
        records.settled("b-1/0", false, false, 300_000);
        for n in 0..3 * SETTLED_GENERATION {
            records.settled(&format!("t-{n:x}"), true, true, 300_000);
        }
        let unlanded = Some(Record::Settled { landed: false });
        assert_eq!(records.record("never-landed", 600_000), unlanded);
        assert_eq!(records.record("b-1/0", 0), unlanded);
        records.sweep(300_000);
        assert_eq!(records.record("b-1/0", 0), None);
        assert_eq!(records.record("never-landed", 0), unlanded);
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn ids_that_differ_only_in_length_hash_apart() {
        let mut records = TicketRecords::default();
        records.held("t-1".to_string(), 10);
        records.held("t-1\0".to_string(), 10);
        assert_eq!(records.len(), 2);
    }
}
