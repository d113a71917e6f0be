//! BPE encodings (embedded in the build by tiktoken-rs and bpe-openai; nothing is downloaded);
//! the choice of encoding for a model is the registry's (`models::tokenizer_for`).
//!
//! o200k_base and cl100k_base, the encodings of every current OpenAI model, are counted by a
//! hand-written split and a byte-pair merge that keeps only the count (`fast.rs`): several
//! times Python tiktoken's speed, same counts. The older encodings go through tiktoken-rs.

mod classes;
mod fast;
#[cfg(any(test, not(feature = "bpe-openai")))]
mod merge;
mod split;

use tiktoken_rs::CoreBPE;

use crate::error::{Error, Result};

/// A tiktoken encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// GPT-4o, GPT-4.1, GPT-5, o1/o3/o4.
    O200kBase,
    /// GPT-4, GPT-3.5-turbo, text-embedding-3.
    Cl100kBase,
    /// Codex and text-davinci-002/003.
    P50kBase,
    /// The edit models.
    P50kEdit,
    /// GPT-3 (`gpt2`).
    R50kBase,
}

impl Encoding {
    /// Every encoding word.
    pub const WORDS: [&'static str; 5] = [
        "o200k_base",
        "cl100k_base",
        "p50k_base",
        "p50k_edit",
        "r50k_base",
    ];

    /// Every encoding, in the order of `WORDS`.
    const ALL: [Encoding; 5] = [
        Encoding::O200kBase,
        Encoding::Cl100kBase,
        Encoding::P50kBase,
        Encoding::P50kEdit,
        Encoding::R50kBase,
    ];

    /// Reads an encoding word (`FromStr`); an unknown word is an error naming `field`, the
    /// word and the accepted words.
    pub fn parse(word: &str, field: &str) -> Result<Encoding> {
        word.parse().map_err(|_| {
            Error::invalid(
                field,
                format!("{word:?}"),
                format!(
                    "is not a known encoding; accepted: {}",
                    Encoding::WORDS.join(", ")
                ),
            )
        })
    }

    /// The encoding's word (also its `Display`).
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
            Encoding::P50kBase => "p50k_base",
            Encoding::P50kEdit => "p50k_edit",
            Encoding::R50kBase => "r50k_base",
        }
    }

    /// The shared BPE (built once per process on first use).
    pub fn bpe(self) -> &'static CoreBPE {
        match self {
            Encoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
            Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
            Encoding::P50kBase => tiktoken_rs::p50k_base_singleton(),
            Encoding::P50kEdit => tiktoken_rs::p50k_edit_singleton(),
            Encoding::R50kBase => tiktoken_rs::r50k_base_singleton(),
        }
    }

    /// The number of tokens of `text`, every special-token spelling counted as plain text (as
    /// a provider counts user text). Equal to tiktoken's `len(enc.encode_ordinary(text))`.
    pub fn count(self, text: &str) -> u64 {
        match self {
            Encoding::O200kBase => fast::count_o200k(text),
            Encoding::Cl100kBase => fast::count_cl100k(text),
            _ if text.is_empty() => 0,
            _ => self.bpe().encode_ordinary(text).len() as u64,
        }
    }
}

/// Counts `text` in the encoding named `encoding`.
pub fn count_tokens(text: &str, encoding: &str) -> Result<u64> {
    Ok(Encoding::parse(encoding, "encoding")?.count(text))
}

crate::guard::domain::words::words!(Encoding);
