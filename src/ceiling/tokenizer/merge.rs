//! tiktoken's byte-pair merge, counting only: repeatedly merge the adjacent pair whose bytes
//! form the lowest-ranked token (the leftmost of equal ranks) until no pair is a token; the
//! count is the number of parts left. tiktoken runs this with a linear scan per merge
//! (quadratic in the piece) below 100 bytes and with a heap above; here it is always the
//! heap, over buffers reused between pieces, so a long piece costs n log n.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;
use tiktoken_rs::CoreBPE;

/// A token's rank (its id): lower ranks merge first.
type Rank = u32;
const NONE: Rank = Rank::MAX;

/// Every ordinary token's bytes with its rank, read back from a tiktoken-rs encoding.
pub(crate) struct Ranks {
    /// Tokens of up to 15 bytes, packed into an integer (see `pack`): no slice compare.
    short: FxHashMap<u128, Rank>,
    /// Longer tokens.
    map: FxHashMap<&'static [u8], Rank>,
    /// The rank of every two-byte token, by `(first << 8) | second` (`NONE` if not a token).
    pairs: Vec<Rank>,
}

impl Ranks {
    /// Reads ranks 0, 1, 2… of `bpe` until the first that is not an ordinary token (the
    /// special tokens come after a gap in both encodings counted here).
    pub(crate) fn new(bpe: &CoreBPE, ordinary: Rank) -> Ranks {
        let mut bytes = Vec::new();
        let mut ends = Vec::with_capacity(ordinary as usize);
        for rank in 0..ordinary {
            let token = bpe
                .decode_bytes(&[rank])
                .expect("every rank below the ordinary count is a token");
            bytes.extend_from_slice(&token);
            ends.push(bytes.len());
        }
        // Kept for the life of the process, as the encodings themselves are.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        let mut short = FxHashMap::with_capacity_and_hasher(ends.len(), Default::default());
        let mut map = FxHashMap::default();
        let mut pairs = vec![NONE; 1 << 16];
        let mut start = 0;
        for (rank, &end) in ends.iter().enumerate() {
            let token = &bytes[start..end];
            match pack(token) {
                Some(key) => short.insert(key, rank as Rank),
                None => map.insert(token, rank as Rank),
            };
            if let [a, b] = token {
                pairs[(usize::from(*a) << 8) | usize::from(*b)] = rank as Rank;
            }
            start = end;
        }
        Ranks { short, map, pairs }
    }

    /// Whether `piece` is one token.
    #[inline]
    pub(crate) fn is_token(&self, piece: &[u8]) -> bool {
        match pack(piece) {
            Some(key) => self.short.contains_key(&key),
            None => self.map.contains_key(piece),
        }
    }

    #[inline]
    fn rank(&self, bytes: &[u8]) -> Rank {
        match bytes {
            [a, b] => self.pairs[(usize::from(*a) << 8) | usize::from(*b)],
            _ => match pack(bytes) {
                Some(key) => self.short.get(&key).copied().unwrap_or(NONE),
                None => self.map.get(bytes).copied().unwrap_or(NONE),
            },
        }
    }
}

/// `bytes` (at most 15) and their length in one integer, distinct for distinct strings.
#[inline]
fn pack(bytes: &[u8]) -> Option<u128> {
    if bytes.len() > 15 {
        return None;
    }
    // A byte loop, not `copy_from_slice`: a variable-length copy is a call to memcpy.
    let mut key = (bytes.len() as u128) << 120;
    for (k, &b) in bytes.iter().enumerate() {
        key |= u128::from(b) << (8 * k);
    }
    Some(key)
}

/// Buffers reused from piece to piece.
#[derive(Default)]
pub(crate) struct Merger {
    /// For the part starting at byte `i`: where it ends, where the part before it starts,
    /// and the rank of merging it with the part after it (`NONE` if that is not a token).
    end: Vec<u32>,
    prev: Vec<u32>,
    next_rank: Vec<Rank>,
    heap: BinaryHeap<Reverse<(Rank, u32)>>,
}

impl Merger {
    /// The number of tokens tiktoken encodes `piece` (two bytes or more) into.
    pub(crate) fn count(&mut self, ranks: &Ranks, piece: &[u8]) -> u64 {
        if piece.len() <= SMALL {
            count_small(ranks, piece)
        } else {
            self.count_large(ranks, piece)
        }
    }

    fn count_large(&mut self, ranks: &Ranks, piece: &[u8]) -> u64 {
        let n = piece.len();
        self.end.clear();
        self.prev.clear();
        self.next_rank.clear();
        self.heap.clear();
        for i in 0..n {
            self.end.push(i as u32 + 1);
            self.prev.push(i.wrapping_sub(1) as u32);
            let rank = if i + 1 < n {
                ranks.rank(&piece[i..i + 2])
            } else {
                NONE
            };
            self.next_rank.push(rank);
            if rank != NONE {
                self.heap.push(Reverse((rank, i as u32)));
            }
        }
        let mut parts = n as u64;
        while let Some(Reverse((rank, left))) = self.heap.pop() {
            let left = left as usize;
            if self.next_rank[left] != rank {
                continue; // superseded by a later merge next to it
            }
            let right = self.end[left] as usize;
            let right_end = self.end[right] as usize;
            self.end[left] = right_end as u32;
            self.next_rank[right] = NONE;
            parts -= 1;
            if right_end < n {
                self.prev[right_end] = left as u32;
                let after = self.end[right_end] as usize;
                self.offer(ranks, piece, left, after);
            } else {
                self.next_rank[left] = NONE;
            }
            if left > 0 {
                let before = self.prev[left] as usize;
                self.offer(ranks, piece, before, right_end);
            }
        }
        parts
    }

    /// Records (and queues) the merge of the part starting at `start` with the one after it,
    /// which together end at `end`.
    #[inline]
    fn offer(&mut self, ranks: &Ranks, piece: &[u8], start: usize, end: usize) {
        let rank = ranks.rank(&piece[start..end]);
        self.next_rank[start] = rank;
        if rank != NONE {
            self.heap.push(Reverse((rank, start as u32)));
        }
    }
}

/// Pieces up to this many bytes are merged on the stack with a scan per merge, as tiktoken
/// does below 100 bytes: for short pieces that beats a heap.
const SMALL: usize = 32;

/// tiktoken's `_byte_pair_merge`, counting only, on the stack: the part starting at byte `i`
/// ends at `next[i]`, and `rank[i]` is the rank of merging it with the part after it (`NONE`
/// for that and for bytes inside a part, so the scan for the lowest rank needs no skipping).
fn count_small(ranks: &Ranks, piece: &[u8]) -> u64 {
    let n = piece.len();
    let mut next = [0u8; SMALL + 1];
    let mut prev = [0u8; SMALL + 1];
    let mut rank = [NONE; SMALL];
    for i in 0..n {
        next[i] = i as u8 + 1;
        prev[i] = i.wrapping_sub(1) as u8;
        if i + 1 < n {
            rank[i] = ranks.rank(&piece[i..i + 2]);
        }
    }
    let mut parts = n as u64;
    loop {
        let mut best = NONE;
        let mut at = 0;
        for (i, &r) in rank[..n].iter().enumerate() {
            if r < best {
                best = r;
                at = i;
            }
        }
        if best == NONE {
            return parts;
        }
        parts -= 1;
        let right = usize::from(next[at]);
        let end = usize::from(next[right]);
        rank[right] = NONE;
        next[at] = end as u8;
        rank[at] = if end < n {
            prev[end] = at as u8;
            ranks.rank(&piece[at..usize::from(next[end])])
        } else {
            NONE
        };
        if at > 0 {
            let before = usize::from(prev[at]);
            rank[before] = ranks.rank(&piece[before..end]);
        }
    }
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
