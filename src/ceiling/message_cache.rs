//! The per-message count cache. An engine re-sends the whole conversation every turn; each
//! message's framed count is kept under a keyed hash of (where it is counted, the encoding,
//! the model, the message), so a recount tokenizes only the new messages. No text is kept:
//! an entry is 32 bytes of key and count. Bounded: two generations of at most `CAPACITY`
//! entries each; a lookup that hits the older one moves the entry to the newer, so what is
//! used stays (an LRU approximation).
//!
//! The key is HighwayHash's 128-bit output under a 256-bit key drawn at random per process,
//! so no input can be crafted to collide with another's count: the key is never revealed and
//! neither are the hashes (a caller sees only counts). A cached recount hashes every message
//! of the conversation on every turn (~60 MB for a 200-turn chat of 3 kB messages), so the
//! hash is most of what it costs. Measured on 3 kB messages (x86-64 with AVX2, 2026-12-02):
//! HighwayHash ~0.32 µs per message; the two SipHash-1-3 passes this replaced (two 64-bit
//! halves from `std`'s `RandomState`) ~0.65 µs; one SipHash-1-3 pass with 128-bit output
//! (`siphasher`) ~0.69 µs, SipHash-2-4 128-bit ~1.3 µs, POLYVAL then AES (RustCrypto, a
//! universal hash made a PRF) ~1.7 µs; keyed BLAKE3 measured slower than the SipHash pair
//! in the recount itself. HighwayHash is designed as a keyed PRF with SIMD lanes (AVX2 picked
//! at run time, SSE4.1 or portable code otherwise: the same output everywhere) but has had
//! less cryptanalysis than SipHash; with a secret key and no output ever shown, an attacker
//! would have to find a 128-bit collision blind.

use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::lock::Mutex;
use highway::{HighwayHash, HighwayHasher, Key};
use rustc_hash::FxHashMap;
use serde_json::Value;

use super::tokenizer::Encoding;
use crate::fork::ForkLocal;

/// Entries per generation (at most twice this many are kept: about 2 MB).
const CAPACITY: usize = 16_384;
/// Messages with less text than this are counted directly: cheaper than a lookup.
const MIN_TEXT_BYTES: usize = 256;

/// Which counting code a message goes through (its framing differs per API).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Site {
    OpenAiChat = 1,
    OpenAiResponses = 2,
    Anthropic = 3,
    Gemini = 4,
    OllamaChat = 5,
}

/// A message's framed count, and whether it is exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub tokens: u64,
    pub exact: bool,
}

/// The tables hash their keys with `FxHasher`: a key is already a keyed hash, so a cheap
/// mix is enough and no one can choose keys that pile up in one bucket.
#[derive(Default)]
struct Generations {
    current: FxHashMap<u128, Entry>,
    previous: FxHashMap<u128, Entry>,
}

/// This process's cache (a forked child starts an empty one: a parent thread may have held
/// the lock at the fork).
static CACHE: ForkLocal<Mutex<Generations>> = ForkLocal::empty();
/// This process's hash key: 256 bits drawn from `std`'s randomly keyed SipHash (its 128-bit
/// key comes from the OS's random source), four outputs of it.
static HASH_KEY: OnceLock<Key> = OnceLock::new();
/// Lookups answered from the cache: a diagnostic for tests.
static HITS: AtomicU64 = AtomicU64::new(0);

fn hash_key() -> Key {
    *HASH_KEY.get_or_init(|| {
        let random = RandomState::new();
        Key(std::array::from_fn(|i| {
            let mut h = random.build_hasher();
            h.write_usize(i);
            h.finish()
        }))
    })
}

/// Feeds a message's structure and text to the hasher: every value tagged with its kind and
/// length, so two different messages never feed the same bytes.
struct Feed {
    hasher: HighwayHasher,
    /// Bytes of text fed so far.
    text: usize,
}

impl Feed {
    fn bytes(&mut self, bytes: &[u8]) {
        self.hasher.append(bytes);
    }
    fn tag(&mut self, tag: u8, len: usize) {
        let mut head = [0u8; 9];
        head[0] = tag;
        head[1..].copy_from_slice(&(len as u64).to_le_bytes());
        self.bytes(&head);
    }
    fn value(&mut self, v: &Value) {
        match v {
            Value::Null => self.tag(0, 0),
            Value::Bool(b) => self.tag(1, usize::from(*b)),
            Value::Number(n) => {
                let text = n.to_string();
                self.tag(2, text.len());
                self.bytes(text.as_bytes());
            }
            Value::String(s) => {
                self.tag(3, s.len());
                self.bytes(s.as_bytes());
                self.text += s.len();
            }
            Value::Array(items) => {
                self.tag(4, items.len());
                items.iter().for_each(|item| self.value(item));
            }
            Value::Object(fields) => {
                self.tag(5, fields.len());
                for (k, item) in fields {
                    self.tag(6, k.len());
                    self.bytes(k.as_bytes());
                    self.value(item);
                }
            }
        }
    }
}

/// The cache key of `message` counted at `site` with `encoding` for `model`; `None` when the
/// message has too little text to be worth caching.
pub(crate) fn key(
    site: Site,
    encoding: Encoding,
    model: Option<&str>,
    message: &Value,
) -> Option<u128> {
    #[cfg(test)]
    if tests::BYPASS.with(std::cell::Cell::get) {
        return None;
    }
    let mut feed = Feed {
        hasher: HighwayHasher::new(hash_key()),
        text: 0,
    };
    feed.tag(site as u8, 0);
    let word = encoding.as_str();
    feed.tag(8, word.len());
    feed.bytes(word.as_bytes());
    let model = model.unwrap_or("");
    feed.tag(7, model.len());
    feed.bytes(model.as_bytes());
    feed.value(message);
    if feed.text < MIN_TEXT_BYTES {
        return None;
    }
    let [high, low] = feed.hasher.finalize128();
    Some((u128::from(high) << 64) | u128::from(low))
}

/// The cached count under `key`, if any (moved to the newer generation).
pub(crate) fn get(key: u128) -> Option<Entry> {
    let mut cache = CACHE.get().lock();
    let generations = &mut *cache;
    let found = match generations.current.get(&key) {
        Some(entry) => Some(*entry),
        None => {
            let entry = generations.previous.remove(&key)?;
            insert(generations, key, entry);
            Some(entry)
        }
    };
    if found.is_some() {
        HITS.fetch_add(1, Ordering::Relaxed);
    }
    found
}

/// Keeps `entry` under `key`.
pub(crate) fn put(key: u128, entry: Entry) {
    insert(&mut CACHE.get().lock(), key, entry);
}

fn insert(generations: &mut Generations, key: u128, entry: Entry) {
    if generations.current.len() >= CAPACITY {
        generations.previous = std::mem::take(&mut generations.current);
    }
    generations.current.insert(key, entry);
}

#[cfg(test)]
pub(crate) fn hits() -> u64 {
    HITS.load(Ordering::Relaxed)
}

#[cfg(test)]
pub(crate) fn entries() -> usize {
    let cache = CACHE.get().lock();
    cache.current.len() + cache.previous.len()
}

#[cfg(test)]
#[path = "message_cache_tests.rs"]
mod tests;
