//! The Unicode character classes tiktoken's split patterns use, as one bit set per code point.
//! The ranges come from `regex-syntax`, the tables the regex engines behind tiktoken read, so a
//! code point is a letter here exactly when `\p{L}` matches it there.

use std::sync::LazyLock;

use regex_syntax::hir::{Class, HirKind};

/// `\p{L}`.
pub(crate) const LETTER: u8 = 1;
/// `\p{N}`.
pub(crate) const NUMBER: u8 = 2;
/// `\s`.
pub(crate) const SPACE: u8 = 4;
/// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`: o200k's "upper" run.
pub(crate) const UPPER: u8 = 8;
/// `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`: o200k's "lower" run.
pub(crate) const LOWER: u8 = 16;
/// `\r` or `\n`.
pub(crate) const NEWLINE: u8 = 32;

const CLASSES: [(&str, u8); 5] = [
    (r"\p{L}", LETTER),
    (r"\p{N}", NUMBER),
    (r"\s", SPACE),
    (r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", UPPER),
    (r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]", LOWER),
];

/// Two-stage table: `BLOCKS[INDEX[cp >> 8]][cp & 0xff]`; identical 256-code-point blocks are
/// stored once (about 50 kB in all).
struct Table {
    index: Vec<u16>,
    blocks: Vec<[u8; 256]>,
}

static TABLE: LazyLock<Table> = LazyLock::new(build);

fn build() -> Table {
    let mut flat = vec![0u8; 0x11_0000];
    for (pattern, bit) in CLASSES {
        let hir = regex_syntax::Parser::new()
            .parse(pattern)
            .expect("a valid class pattern");
        let HirKind::Class(Class::Unicode(class)) = hir.kind() else {
            unreachable!("{pattern} is a Unicode class")
        };
        for range in class.ranges() {
            for cp in u32::from(range.start())..=u32::from(range.end()) {
                flat[cp as usize] |= bit;
            }
        }
    }
    flat[usize::from(b'\r')] |= NEWLINE;
    flat[usize::from(b'\n')] |= NEWLINE;
    let mut blocks: Vec<[u8; 256]> = Vec::new();
    let mut seen = std::collections::HashMap::new();
    let index = flat
        .chunks_exact(256)
        .map(|chunk| {
            let block: [u8; 256] = chunk.try_into().expect("256 bytes");
            *seen.entry(block).or_insert_with(|| {
                blocks.push(block);
                (blocks.len() - 1) as u16
            })
        })
        .collect();
    Table { index, blocks }
}

/// Forces the table to be built (so the first count does not pay for it inside a timing).
pub(crate) fn warm() {
    LazyLock::force(&TABLE);
}

/// The class bits of code point `cp`.
#[inline]
pub(crate) fn of(cp: u32) -> u8 {
    let table = &*TABLE;
    table.blocks[usize::from(table.index[(cp >> 8) as usize])][(cp & 0xff) as usize]
}
