//! Counting for o200k_base and cl100k_base: the hand-written split (`split.rs`), then per
//! piece tiktoken's own shortcut (a piece that is a whole token is one token), else a
//! byte-pair merge that yields tiktoken's tokens, counting only:
//!
//! - with the `bpe-openai` feature (default), that crate's linear-time encoder (2–3× faster
//!   than tiktoken's merge on CJK text; it embeds ~47 MB of prebuilt tables, ~25 MB in a
//!   compressed wheel);
//! - without it, tiktoken's merge over a heap (`merge.rs`), on the ranks tiktoken-rs embeds.

use std::sync::LazyLock;

use super::split::{for_each_piece, Pattern};

#[cfg(feature = "bpe-openai")]
mod engine {
    use bpe_openai::byte_pair_encoding::BytePairEncoding;
    use rustc_hash::FxHashSet;

    pub(crate) struct Engine {
        bpe: &'static BytePairEncoding,
        /// Every token's bytes: a piece found here is one token.
        whole: FxHashSet<&'static [u8]>,
    }

    /// Buffers reused between pieces (none needed here; the built-in merge has some).
    #[derive(Default)]
    pub(crate) struct Scratch(());

    impl Engine {
        pub(crate) fn o200k() -> Engine {
            Engine::new(&bpe_openai::o200k_base().bpe)
        }

        pub(crate) fn cl100k() -> Engine {
            Engine::new(&bpe_openai::cl100k_base().bpe)
        }

        fn new(bpe: &'static BytePairEncoding) -> Engine {
            let whole = (0..bpe.num_tokens() as u32)
                .map(|t| bpe.token_bytes(t))
                .collect();
            Engine { bpe, whole }
        }

        #[inline]
        pub(crate) fn is_token(&self, piece: &[u8]) -> bool {
            self.whole.contains(piece)
        }

        pub(crate) fn count(&self, _: &mut Scratch, piece: &[u8]) -> u64 {
            self.bpe.count(piece) as u64
        }
    }
}

#[cfg(not(feature = "bpe-openai"))]
mod engine {
    use super::super::merge::{Merger, Ranks};

    pub(crate) struct Engine(Ranks);

    pub(crate) type Scratch = Merger;

    impl Engine {
        /// o200k_base's ordinary tokens are ranks 0..199_998 (its special tokens are 199_999
        /// and 200_018); cl100k_base's are 0..100_256 (specials from 100_257).
        pub(crate) fn o200k() -> Engine {
            Engine(Ranks::new(tiktoken_rs::o200k_base_singleton(), 199_998))
        }

        pub(crate) fn cl100k() -> Engine {
            Engine(Ranks::new(tiktoken_rs::cl100k_base_singleton(), 100_256))
        }

        #[inline]
        pub(crate) fn is_token(&self, piece: &[u8]) -> bool {
            self.0.is_token(piece)
        }

        pub(crate) fn count(&self, scratch: &mut Scratch, piece: &[u8]) -> u64 {
            scratch.count(&self.0, piece)
        }
    }
}

use engine::{Engine, Scratch};

struct Counter {
    engine: Engine,
    pattern: Pattern,
}

impl Counter {
    fn new(engine: Engine, pattern: Pattern) -> Counter {
        super::classes::warm();
        Counter { engine, pattern }
    }

    fn count(&self, text: &str) -> u64 {
        let mut scratch = Scratch::default();
        let mut n = 0u64;
        for_each_piece(self.pattern, text, |piece| {
            n += if piece.len() == 1 || self.engine.is_token(piece) {
                1
            } else {
                self.engine.count(&mut scratch, piece)
            };
        });
        n
    }
}

static O200K: LazyLock<Counter> = LazyLock::new(|| Counter::new(Engine::o200k(), Pattern::O200k));
static CL100K: LazyLock<Counter> =
    LazyLock::new(|| Counter::new(Engine::cl100k(), Pattern::Cl100k));

/// The number of o200k_base tokens of `text`.
pub(crate) fn count_o200k(text: &str) -> u64 {
    O200K.count(text)
}

/// The number of cl100k_base tokens of `text`.
pub(crate) fn count_cl100k(text: &str) -> u64 {
    CL100K.count(text)
}

#[cfg(test)]
mod tests {
    /// Whichever engine is compiled in (the `bpe-openai` feature or the built-in merge) counts
    /// as tiktoken-rs does.
    #[test]
    fn counts_as_tiktoken_rs() {
        let texts = [
            "",
            "Hello, world! It's 2026.\n\n  indented\tand trailing   ",
            "東京タワーは今日も高いです。🙂🚀 서울 データ用户限额",
            "fn main() { let v: Vec<u64> = (0..10).map(|x| x * x).collect(); }",
        ];
        for text in texts {
            let long = text.repeat(50);
            for t in [text, long.as_str()] {
                let o200k = tiktoken_rs::o200k_base_singleton().encode_ordinary(t);
                let cl100k = tiktoken_rs::cl100k_base_singleton().encode_ordinary(t);
                assert_eq!(super::count_o200k(t), o200k.len() as u64, "{t:?}");
                assert_eq!(super::count_cl100k(t), cl100k.len() as u64, "{t:?}");
            }
        }
    }
}
