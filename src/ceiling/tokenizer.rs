//! BPE encodings (embedded in the build by tiktoken-rs; nothing is downloaded) and the choice
//! of encoding for a model.

use tiktoken_rs::CoreBPE;

use super::models::known_model;
use crate::error::{Error, Result};
use crate::guard::domain::policy::{Counting, ModelSpec};

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

    /// Parses an encoding word; an unknown word is an error naming `field`, the word and the
    /// accepted words.
    pub fn parse(word: &str, field: &str) -> Result<Encoding> {
        Ok(match word {
            "o200k_base" => Encoding::O200kBase,
            "cl100k_base" => Encoding::Cl100kBase,
            "p50k_base" => Encoding::P50kBase,
            "p50k_edit" => Encoding::P50kEdit,
            "r50k_base" => Encoding::R50kBase,
            _ => {
                return Err(Error::invalid(
                    field,
                    format!("{word:?}"),
                    format!(
                        "is not a known encoding; accepted: {}",
                        Encoding::WORDS.join(", ")
                    ),
                ))
            }
        })
    }

    /// The encoding's word.
    pub fn word(self) -> &'static str {
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
        if text.is_empty() {
            return 0;
        }
        self.bpe().encode_ordinary(text).len() as u64
    }
}

/// Counts `text` in the encoding named `encoding`.
pub fn count_tokens(text: &str, encoding: &str) -> Result<u64> {
    Ok(Encoding::parse(encoding, "encoding")?.count(text))
}

/// How prompts for one model are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tokenizer {
    /// The encoding to count with.
    pub encoding: Encoding,
    /// True when `encoding` is the model's own tokenizer; false for an estimate (then the
    /// ceiling's `margin` is kept free).
    pub exact: bool,
}

/// The tokenizer for a model: the policy entry's `encoding`/`counting` when given, else the
/// built-in registry (gpt-4o, gpt-4.1, gpt-5, o1/o3/o4 → o200k_base; gpt-4, gpt-3.5-turbo →
/// cl100k_base; exact), else o200k_base as an estimate (Claude, Gemini, Llama, unknown).
/// An encoding declared without `counting` is taken as exact only when the registry agrees.
pub fn tokenizer_for(model: Option<&str>, spec: Option<&ModelSpec>) -> Result<Tokenizer> {
    let id = model.or(spec.map(|s| &*s.id));
    let known = id.and_then(known_model);
    let mut tokenizer = match known {
        Some(k) => Tokenizer {
            encoding: k.encoding,
            exact: k.exact,
        },
        None => Tokenizer {
            encoding: Encoding::O200kBase,
            exact: false,
        },
    };
    if let Some(spec) = spec {
        if let Some(word) = &spec.encoding {
            let declared = Encoding::parse(word, &format!("models.{}.encoding", spec.id))?;
            if declared != tokenizer.encoding {
                tokenizer.exact = false;
            }
            tokenizer.encoding = declared;
        }
        if let Some(counting) = spec.counting {
            tokenizer.exact = counting == Counting::Exact;
        }
    }
    Ok(tokenizer)
}
