//! Hand-written equivalents of tiktoken's split patterns for o200k_base and cl100k_base: the
//! same pieces the backtracking regex engine finds, in one forward pass with no regex.
//!
//! o200k_base (each alternative tried in order at the current position, first match wins):
//! ```text
//! [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//! [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//! \p{N}{1,3}
//!  ?[^\s\p{L}\p{N}]+[\r\n/]*
//! \s*[\r\n]+
//! \s+(?!\S)
//! \s+
//! ```
//! cl100k_base (tiktoken ≥ 0.8 spelling, possessive):
//! ```text
//! '(?i:[sdmt]|ll|ve|re)
//! [^\r\n\p{L}\p{N}]?+\p{L}++
//! \p{N}{1,3}+
//!  ?[^\s\p{L}\p{N}]++[\r\n]*+
//! \s++$
//! \s*[\r\n]
//! \s+(?!\S)
//! \s
//! ```

use super::classes::{self, LETTER, LOWER, NEWLINE, NUMBER, SPACE, UPPER};

/// Which split pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// o200k_base's.
    O200k,
    /// cl100k_base's.
    Cl100k,
}

/// Calls `piece` with each piece of `text`, in order; the pieces concatenate to `text`.
pub(crate) fn for_each_piece(pattern: Pattern, text: &str, mut piece: impl FnMut(&[u8])) {
    let s = Scanner { b: text.as_bytes() };
    let mut start = 0;
    while start < s.b.len() {
        let end = match pattern {
            Pattern::O200k => s.o200k_end(start),
            Pattern::Cl100k => s.cl100k_end(start),
        };
        debug_assert!(end > start);
        piece(&s.b[start..end]);
        start = end;
    }
}

/// The pieces of `text` as strings.
#[cfg(test)]
pub(crate) fn pieces(pattern: Pattern, text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut at = 0;
    for_each_piece(pattern, text, |p| {
        out.push(&text[at..at + p.len()]);
        at += p.len();
    });
    out
}

/// "Not a letter, a number, `\r` or `\n`": the optional prefix of a letter run.
const NOT_PREFIX: u8 = LETTER | NUMBER | NEWLINE;
/// "Not whitespace, a letter or a number": a punctuation run.
const NOT_PUNCT: u8 = SPACE | LETTER | NUMBER;

struct Scanner<'a> {
    b: &'a [u8],
}

impl Scanner<'_> {
    /// The class bits and UTF-8 length of the character starting at byte `i` (< len).
    #[inline]
    fn at(&self, i: usize) -> (u8, usize) {
        let b0 = self.b[i];
        if b0 < 0x80 {
            return (classes::of(u32::from(b0)), 1);
        }
        // `b` is valid UTF-8 (it came from a `&str`), so the continuation bytes are there.
        let (cp, n) = if b0 < 0xE0 {
            (
                (u32::from(b0 & 0x1F) << 6) | u32::from(self.b[i + 1] & 0x3F),
                2,
            )
        } else if b0 < 0xF0 {
            (
                (u32::from(b0 & 0x0F) << 12)
                    | (u32::from(self.b[i + 1] & 0x3F) << 6)
                    | u32::from(self.b[i + 2] & 0x3F),
                3,
            )
        } else {
            (
                (u32::from(b0 & 0x07) << 18)
                    | (u32::from(self.b[i + 1] & 0x3F) << 12)
                    | (u32::from(self.b[i + 2] & 0x3F) << 6)
                    | u32::from(self.b[i + 3] & 0x3F),
                4,
            )
        };
        (classes::of(cp), n)
    }

    /// The class bits of the character at `i`, or 0 past the end.
    #[inline]
    fn class(&self, i: usize) -> u8 {
        if i < self.b.len() {
            self.at(i).0
        } else {
            0
        }
    }

    /// The end of the run of characters having any of `bits`, from `i`.
    #[inline]
    fn run(&self, mut i: usize, bits: u8) -> usize {
        while i < self.b.len() {
            let (c, n) = self.at(i);
            if c & bits == 0 {
                break;
            }
            i += n;
        }
        i
    }

    /// The end of the run of characters having none of `bits`, from `i`.
    #[inline]
    fn run_without(&self, mut i: usize, bits: u8) -> usize {
        while i < self.b.len() {
            let (c, n) = self.at(i);
            if c & bits != 0 {
                break;
            }
            i += n;
        }
        i
    }

    /// The length of `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at `i` (0 when absent). Under Unicode case
    /// folding `s` also matches `ſ` (U+017F); no other letter of the set has another fold.
    fn contraction(&self, i: usize) -> usize {
        let b = self.b;
        if b.get(i) != Some(&b'\'') {
            return 0;
        }
        let lower = |j: usize| b.get(j).map(|c| c.to_ascii_lowercase());
        match lower(i + 1) {
            Some(b's' | b't' | b'm' | b'd') => 2,
            Some(0xC5) if b.get(i + 2) == Some(&0xBF) => 3,
            Some(b'r') if lower(i + 2) == Some(b'e') => 3,
            Some(b'v') if lower(i + 2) == Some(b'e') => 3,
            Some(b'l') if lower(i + 2) == Some(b'l') => 3,
            _ => 0,
        }
    }

    /// o200k's two letter alternatives with the body starting at `i`: (end of the first,
    /// end of the second) — `[U]*[W]+` and `[U]+[W]*`, before the contraction.
    #[inline]
    fn o200k_bodies(&self, i: usize) -> (Option<usize>, Option<usize>) {
        let mut p = i;
        let mut last_lower = None;
        while p < self.b.len() {
            let (c, n) = self.at(p);
            if c & UPPER == 0 {
                break;
            }
            p += n;
            if c & LOWER != 0 {
                last_lower = Some(p);
            }
        }
        let upper_end = p;
        let lower_end = self.run(upper_end, LOWER);
        // `[U]*` gives characters back until `[W]+` can start: the longest way is a lower run
        // right after the upper run, else the upper run up to its last character that is
        // also "lower" (Lm, Lo, M).
        let first = if lower_end > upper_end {
            Some(lower_end)
        } else {
            last_lower
        };
        let second = (upper_end > i).then_some(lower_end);
        (first, second)
    }

    fn o200k_end(&self, start: usize) -> usize {
        let (c0, n0) = self.at(start);
        let prefixed = c0 & NOT_PREFIX == 0;
        let letter_like = c0 & (UPPER | LOWER) != 0;
        if prefixed || letter_like {
            // Order of a backtracking engine: the first alternative with the prefix, then
            // without it (only a mark can be both a prefix and a body), then the second.
            let with = prefixed.then(|| self.o200k_bodies(start + n0));
            let end = match with {
                Some((Some(e), _)) => Some(e),
                _ if letter_like => {
                    let (first, second) = self.o200k_bodies(start);
                    first.or(with.and_then(|w| w.1)).or(second)
                }
                _ => with.and_then(|w| w.1),
            };
            if let Some(e) = end {
                return e + self.contraction(e);
            }
        }
        if c0 & NUMBER != 0 {
            return self.numbers(start);
        }
        if let Some(e) = self.punct(start, c0, NEWLINE | SLASH) {
            return e;
        }
        let (end, last_newline_end, last_start) = self.spaces(start);
        if let Some(e) = last_newline_end {
            return e; // \s*[\r\n]+
        }
        self.spaces_tail(start, end, last_start)
    }

    fn cl100k_end(&self, start: usize) -> usize {
        let k = self.cl100k_contraction(start);
        if k > 0 {
            return start + k;
        }
        let (c0, n0) = self.at(start);
        if c0 & LETTER != 0 {
            return self.run(start, LETTER);
        }
        if c0 & NOT_PREFIX == 0 && self.class(start + n0) & LETTER != 0 {
            return self.run(start + n0, LETTER);
        }
        if c0 & NUMBER != 0 {
            return self.numbers(start);
        }
        if let Some(e) = self.punct(start, c0, NEWLINE) {
            return e;
        }
        let (end, last_newline_end, last_start) = self.spaces(start);
        if end == self.b.len() {
            return end; // \s++$
        }
        if let Some(e) = last_newline_end {
            return e; // \s*[\r\n]
        }
        self.spaces_tail(start, end, last_start)
    }

    /// cl100k's leading `'(?i:[sdmt]|ll|ve|re)`: the same set as o200k's suffix.
    fn cl100k_contraction(&self, start: usize) -> usize {
        self.contraction(start)
    }

    /// `\p{N}{1,3}` at `start` (a number).
    fn numbers(&self, start: usize) -> usize {
        let mut e = start;
        for _ in 0..3 {
            if e < self.b.len() {
                let (c, n) = self.at(e);
                if c & NUMBER != 0 {
                    e += n;
                    continue;
                }
            }
            break;
        }
        e
    }

    /// ` ?[^\s\p{L}\p{N}]+` then a run of the characters in `trail` (`\r`, `\n`, and for
    /// o200k `/`), at `start` whose class is `c0`.
    fn punct(&self, start: usize, c0: u8, trail: u8) -> Option<usize> {
        let body = if c0 & NOT_PUNCT == 0 {
            start
        } else if self.b[start] == b' '
            && start + 1 < self.b.len()
            && self.class(start + 1) & NOT_PUNCT == 0
        {
            start + 1
        } else {
            return None;
        };
        let e = self.run_without(body, NOT_PUNCT);
        Some(self.trail(e, trail))
    }

    fn trail(&self, mut e: usize, trail: u8) -> usize {
        while let Some(&c) = self.b.get(e) {
            let hit = match c {
                b'\r' | b'\n' => trail & NEWLINE != 0,
                b'/' => trail & SLASH != 0,
                _ => false,
            };
            if !hit {
                break;
            }
            e += 1;
        }
        e
    }

    /// The whitespace run at `start`: (its end, the end of its last `\r`/`\n`, the start of
    /// its last character).
    fn spaces(&self, start: usize) -> (usize, Option<usize>, usize) {
        let mut p = start;
        let mut last_newline_end = None;
        let mut last_start = start;
        while p < self.b.len() {
            let (c, n) = self.at(p);
            if c & SPACE == 0 {
                break;
            }
            last_start = p;
            p += n;
            if c & NEWLINE != 0 {
                last_newline_end = Some(p);
            }
        }
        (p, last_newline_end, last_start)
    }

    /// `\s+(?!\S)` then `\s+` over the whitespace run `start..end`.
    fn spaces_tail(&self, start: usize, end: usize, last_start: usize) -> usize {
        if end == self.b.len() || last_start == start {
            end
        } else {
            last_start
        }
    }
}

/// A pseudo class bit for `/` in `punct`'s trail (not a Unicode class).
const SLASH: u8 = 64;

#[cfg(test)]
#[path = "split_tests.rs"]
mod tests;
