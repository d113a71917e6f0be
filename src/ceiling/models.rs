//! The built-in model registry: the tokenizer encoding, window and output maximum of well-known
//! models, used when the policy does not describe a model. A policy's model entry always wins.

use super::tokenizer::Encoding;
use crate::error::Result;
use crate::guard::domain::policy::{Counting, ModelSpec};

/// The thinking budget a model accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkingRange {
    /// The smallest budget the provider accepts while thinking is on.
    pub min: u64,
    /// The largest budget the provider accepts.
    pub max: u64,
    /// Whether thinking can be turned off (Anthropic: drop it; Gemini: budget 0).
    pub can_disable: bool,
}

impl ThinkingRange {
    /// Anthropic extended thinking: `budget_tokens` ≥ 1,024 and below `max_tokens`; it can
    /// always be turned off.
    pub const ANTHROPIC: ThinkingRange = ThinkingRange {
        min: 1024,
        max: u64::MAX,
        can_disable: true,
    };
    /// A Gemini model this registry does not know: the budget is only kept below the output
    /// maximum, never turned off (0 is refused by models that cannot turn thinking off).
    pub const GEMINI_UNKNOWN: ThinkingRange = ThinkingRange {
        min: 1,
        max: u64::MAX,
        can_disable: false,
    };
}

/// What the registry knows about a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownModel {
    /// The id prefix this entry matched.
    pub prefix: &'static str,
    /// The encoding prompts are counted with.
    pub encoding: Encoding,
    /// Whether `encoding` is the model's own tokenizer (counts are exact) or a stand-in.
    pub exact: bool,
    /// Input and output together.
    pub context_window: Option<u64>,
    /// A separate input limit, where the provider declares one.
    pub max_input_tokens: Option<u64>,
    /// The most output one call can ask for.
    pub max_output_tokens: Option<u64>,
    /// The numeric thinking budget it accepts, where it has one.
    pub thinking: Option<ThinkingRange>,
}

const fn openai(
    prefix: &'static str,
    encoding: Encoding,
    window: u64,
    input: Option<u64>,
    output: u64,
) -> KnownModel {
    KnownModel {
        prefix,
        encoding,
        exact: true,
        context_window: Some(window),
        max_input_tokens: input,
        max_output_tokens: Some(output),
        thinking: None,
    }
}

const fn estimated(
    prefix: &'static str,
    window: u64,
    output: u64,
    thinking: Option<ThinkingRange>,
) -> KnownModel {
    KnownModel {
        prefix,
        encoding: Encoding::O200kBase,
        exact: false,
        context_window: Some(window),
        max_input_tokens: None,
        max_output_tokens: Some(output),
        thinking,
    }
}

const fn embedding(prefix: &'static str, encoding: Encoding, input: u64) -> KnownModel {
    KnownModel {
        prefix,
        encoding,
        exact: true,
        context_window: None,
        max_input_tokens: Some(input),
        max_output_tokens: None,
        thinking: None,
    }
}

use Encoding::{Cl100kBase as CL, O200kBase as O2};

const GEMINI_PRO: ThinkingRange = ThinkingRange {
    min: 128,
    max: 32768,
    can_disable: false,
};
const GEMINI_FLASH: ThinkingRange = ThinkingRange {
    min: 1,
    max: 24576,
    can_disable: true,
};
const GEMINI_FLASH_LITE: ThinkingRange = ThinkingRange {
    min: 512,
    max: 24576,
    can_disable: true,
};
const A: Option<ThinkingRange> = Some(ThinkingRange::ANTHROPIC);

/// Checked in order; the first prefix that matches wins, so longer prefixes come first.
static REGISTRY: &[KnownModel] = &[
    // OpenAI, o200k_base.
    openai("gpt-5", O2, 400_000, Some(272_000), 128_000),
    openai("gpt-4.1", O2, 1_047_576, None, 32_768),
    openai("gpt-4.5", O2, 128_000, None, 16_384),
    openai("gpt-4o", O2, 128_000, None, 16_384),
    openai("chatgpt-4o", O2, 128_000, None, 16_384),
    openai("o1-mini", O2, 128_000, None, 65_536),
    openai("o1", O2, 200_000, None, 100_000),
    openai("o3", O2, 200_000, None, 100_000),
    openai("o4", O2, 200_000, None, 100_000),
    // OpenAI, cl100k_base.
    openai("gpt-4-turbo", CL, 128_000, None, 4_096),
    openai("gpt-4-32k", CL, 32_768, None, 32_768),
    openai("gpt-4", CL, 8_192, None, 8_192),
    openai("gpt-3.5-turbo", CL, 16_385, None, 4_096),
    openai("gpt-35-turbo", CL, 16_385, None, 4_096),
    embedding("text-embedding-3", CL, 8_191),
    embedding("text-embedding-ada-002", CL, 8_191),
    // Anthropic: no public tokenizer; counted with o200k_base as an estimate.
    estimated("claude-opus-4-1", 200_000, 32_000, A),
    estimated("claude-opus-4-0", 200_000, 32_000, A),
    estimated("claude-opus-4-2", 200_000, 32_000, A),
    estimated("claude-opus-4-5", 200_000, 64_000, A),
    estimated("claude-opus-4", 200_000, 32_000, A),
    estimated("claude-sonnet-4", 200_000, 64_000, A),
    estimated("claude-haiku-4", 200_000, 64_000, A),
    estimated("claude-3-7-sonnet", 200_000, 64_000, A),
    estimated("claude-3-5", 200_000, 8_192, None),
    estimated("claude-3", 200_000, 4_096, None),
    // Gemini: counted with o200k_base as an estimate.
    estimated("gemini-2.5-pro", 1_048_576, 65_536, Some(GEMINI_PRO)),
    estimated(
        "gemini-2.5-flash-lite",
        1_048_576,
        65_536,
        Some(GEMINI_FLASH_LITE),
    ),
    estimated("gemini-2.5-flash", 1_048_576, 65_536, Some(GEMINI_FLASH)),
    estimated("gemini-2.0-flash", 1_048_576, 8_192, None),
];

/// The registry entry of a model id (matched by prefix, case-insensitive, after any
/// `provider/` routing prefix such as `openai/gpt-4o`), or `None` for a model it does not know.
pub fn known_model(model: &str) -> Option<&'static KnownModel> {
    let id = model.rsplit('/').next().unwrap_or(model).as_bytes();
    // Prefixes are lower case: compare ignoring ASCII case, without a lowered copy.
    REGISTRY.iter().find(|m| {
        let prefix = m.prefix.as_bytes();
        id.len() >= prefix.len() && id[..prefix.len()].eq_ignore_ascii_case(prefix)
    })
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
