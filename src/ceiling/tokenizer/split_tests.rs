//! The hand-written split against tiktoken's own patterns run by fancy-regex (the engine
//! tiktoken and tiktoken-rs use), piece by piece.

use std::sync::LazyLock;

use proptest::prelude::*;

use super::{pieces, Pattern};

/// tiktoken's cl100k_base pattern (tiktoken ≥ 0.8; tiktoken-rs 0.12 spells it the same).
const CL100K: &str = r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s";

static O200K_RE: LazyLock<fancy_regex::Regex> = LazyLock::new(|| {
    fancy_regex::Regex::new(tiktoken_rs::O200K_BASE_PAT_STR).expect("tiktoken's pattern")
});
static CL100K_RE: LazyLock<fancy_regex::Regex> =
    LazyLock::new(|| fancy_regex::Regex::new(CL100K).expect("tiktoken's pattern"));

fn reference(pattern: Pattern) -> &'static fancy_regex::Regex {
    match pattern {
        Pattern::O200k => &O200K_RE,
        Pattern::Cl100k => &CL100K_RE,
    }
}

fn expected<'a>(re: &fancy_regex::Regex, text: &'a str) -> Vec<&'a str> {
    re.find_iter(text)
        .map(|m| m.expect("no backtrack limit hit").as_str())
        .collect()
}

fn assert_same_split(text: &str) {
    for pattern in [Pattern::O200k, Pattern::Cl100k] {
        let re = reference(pattern);
        assert_eq!(
            pieces(pattern, text),
            expected(re, text),
            "{pattern:?} {text:?}"
        );
    }
}

#[test]
fn edge_cases_split_as_tiktoken_does() {
    for text in [
        "",
        " ",
        "a",
        "Hello, world! It's 2026 and we'll see.",
        "   leading and trailing   ",
        "a\n  ",
        "a \n\n \t b\r\n\r\nc",
        "tabs\t\tand\u{a0}\u{a0}nbsp\u{3000}ideographic",
        "12345678 1,000,000 3.14159 ²³ Ⅻ ٣٤٥",
        "I'M HERE 'S 'Re 'LL 'ſ x'ſ don'T",
        "CamelCaseWord HTTPServer ǅemal ʰmodifier",
        "e\u{301}\u{301} \u{301}x .\u{301} \u{301}\u{301}",
        "東京タワー 서울 🙂🚀 👩\u{200d}💻 ❤\u{fe0f}",
        "a/b//c\n/ ./ ?!\n\n",
        "path/to/file.rs:12:3 => x->y",
        "\r\r\n\n\u{2028}\u{2029}\u{85}",
    ] {
        assert_same_split(text);
    }
}

#[test]
fn long_runs_split_as_tiktoken_does() {
    for text in [
        " ".repeat(5000),
        format!("x{}y", " ".repeat(5000)),
        "9".repeat(10_000),
        "supercalifragilistic".repeat(2000),
        "\n".repeat(3000) + "z",
        "!?".repeat(3000),
    ] {
        assert_same_split(&text);
    }
}

/// Characters chosen to meet every branch: each letter category, marks, each number
/// category, ASCII and Unicode whitespace, newlines, the contraction letters and `ſ`.
const ALPHABET: &[char] = &[
    'a', 'Z', 'é', 'É', 'ǅ', 'ʰ', '東', 'タ', '\u{301}', '\u{903}', '1', '²', 'Ⅻ', '٣', ' ', ' ',
    ' ', '\t', '\n', '\r', '\u{a0}', '\u{3000}', '\u{2028}', '\'', 's', 'S', 'ſ', 't', 'r', 'e',
    'l', 'L', 'v', 'm', 'd', '/', '.', '!', '😀', '\u{200d}', '\u{fe0f}', '_', '-',
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]
    #[test]
    fn tricky_text_splits_as_tiktoken_does(
        chars in prop::collection::vec(prop::sample::select(ALPHABET), 0..40)
    ) {
        let text: String = chars.into_iter().collect();
        for pattern in [Pattern::O200k, Pattern::Cl100k] {
            let re = reference(pattern);
            prop_assert_eq!(pieces(pattern, &text), expected(re, &text), "{:?}", pattern);
        }
    }

    #[test]
    fn any_text_splits_as_tiktoken_does(text in any::<String>()) {
        for pattern in [Pattern::O200k, Pattern::Cl100k] {
            let re = reference(pattern);
            prop_assert_eq!(pieces(pattern, &text), expected(re, &text), "{:?}", pattern);
        }
    }
}
