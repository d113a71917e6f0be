//! The API shapes a request can be sent in.

use crate::error::{Error, Result};
use crate::guard::domain::policy::Provider;
use crate::guard::domain::words::{display_as_str, UnknownWord};

/// The API shape of a request: which provider endpoint it goes to. The words are what users
/// pass as `provider=` in Python.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// OpenAI chat completions (`/v1/chat/completions`); also OpenAI-compatible servers.
    OpenAiChat,
    /// OpenAI legacy completions (`/v1/completions`): `prompt`, `max_tokens` (16 when absent).
    OpenAiCompletions,
    /// OpenAI responses (`/v1/responses`).
    OpenAiResponses,
    /// OpenAI embeddings (`/v1/embeddings`).
    OpenAiEmbeddings,
    /// Anthropic messages (`/v1/messages`).
    Anthropic,
    /// Gemini `generateContent` (REST camelCase or SDK snake_case fields).
    Gemini,
    /// Ollama `/api/chat`.
    OllamaChat,
    /// Ollama `/api/generate`.
    OllamaGenerate,
    /// Ollama `/api/embed` (and the older `/api/embeddings`).
    OllamaEmbed,
}

impl Api {
    /// Every word of an API (`as_str`, `Display`), in order; `FromStr` also reads the aliases.
    pub const WORDS: [&'static str; 9] = [
        "openai",
        "openai.completions",
        "openai.responses",
        "openai.embeddings",
        "anthropic",
        "gemini",
        "ollama",
        "ollama.generate",
        "ollama.embed",
    ];

    /// Reads an API word (`FromStr`); an unknown word is an invalid-argument error naming
    /// `field`, the word and the accepted words.
    pub fn parse(word: &str, field: &str) -> Result<Api> {
        word.parse().map_err(|_| {
            Error::invalid(
                field,
                format!("{word:?}"),
                format!("is not a known API; accepted: {}", Api::WORDS.join(", ")),
            )
        })
    }

    /// The word of this API (also its `Display`).
    pub fn as_str(self) -> &'static str {
        match self {
            Api::OpenAiChat => "openai",
            Api::OpenAiCompletions => "openai.completions",
            Api::OpenAiResponses => "openai.responses",
            Api::OpenAiEmbeddings => "openai.embeddings",
            Api::Anthropic => "anthropic",
            Api::Gemini => "gemini",
            Api::OllamaChat => "ollama",
            Api::OllamaGenerate => "ollama.generate",
            Api::OllamaEmbed => "ollama.embed",
        }
    }

    /// The provider that serves this API.
    pub fn provider(self) -> Provider {
        match self {
            Api::OpenAiChat
            | Api::OpenAiCompletions
            | Api::OpenAiResponses
            | Api::OpenAiEmbeddings => Provider::OpenAi,
            Api::Anthropic => Provider::Anthropic,
            Api::Gemini => Provider::Gemini,
            Api::OllamaChat | Api::OllamaGenerate | Api::OllamaEmbed => Provider::Ollama,
        }
    }

    /// True for embeddings: no output, only the input must fit.
    pub fn is_embeddings(self) -> bool {
        matches!(self, Api::OpenAiEmbeddings | Api::OllamaEmbed)
    }
}

display_as_str!(Api);

/// An API word; `openai.chat` and `ollama.chat` (and `ollama.embeddings`) are aliases.
impl std::str::FromStr for Api {
    type Err = UnknownWord;

    fn from_str(word: &str) -> std::result::Result<Api, UnknownWord> {
        Ok(match word {
            "openai" | "openai.chat" => Api::OpenAiChat,
            "openai.completions" => Api::OpenAiCompletions,
            "openai.responses" => Api::OpenAiResponses,
            "openai.embeddings" => Api::OpenAiEmbeddings,
            "anthropic" => Api::Anthropic,
            "gemini" => Api::Gemini,
            "ollama" | "ollama.chat" => Api::OllamaChat,
            "ollama.generate" => Api::OllamaGenerate,
            "ollama.embed" | "ollama.embeddings" => Api::OllamaEmbed,
            _ => return Err(UnknownWord),
        })
    }
}
