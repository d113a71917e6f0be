//! The counting merge against tiktoken-rs's encoder, piece by piece: short pieces (the
//! stack path), long ones (the heap), and pieces made of repeats (equal ranks side by side).

use std::sync::LazyLock;

use proptest::prelude::*;

use super::super::split::{for_each_piece, Pattern};
use super::{Merger, Ranks};

static O200K: LazyLock<Ranks> =
    LazyLock::new(|| Ranks::new(tiktoken_rs::o200k_base_singleton(), 199_998));
static CL100K: LazyLock<Ranks> =
    LazyLock::new(|| Ranks::new(tiktoken_rs::cl100k_base_singleton(), 100_256));

fn check(text: &str) {
    let encodings = [
        (tiktoken_rs::o200k_base_singleton(), &*O200K, Pattern::O200k),
        (
            tiktoken_rs::cl100k_base_singleton(),
            &*CL100K,
            Pattern::Cl100k,
        ),
    ];
    for (bpe, ranks, pattern) in encodings {
        let mut merger = Merger::default();
        for_each_piece(pattern, text, |piece| {
            let piece_text = std::str::from_utf8(piece).expect("pieces of a str are UTF-8 here");
            let expected = bpe.encode_ordinary(piece_text).len() as u64;
            let got = if piece.len() == 1 || ranks.is_token(piece) {
                1
            } else {
                merger.count(ranks, piece)
            };
            assert_eq!(got, expected, "{pattern:?} piece {piece_text:?}");
        });
    }
}

#[test]
fn short_long_and_repeated_pieces_merge_as_tiktoken_does() {
    check("東京タワーは今日も高いです。お誕生日おめでとう");
    check(&"東京大阪京都データ用户限额今日は天気".repeat(20));
    check(&"aaaa".repeat(100));
    check(&"abababab".repeat(40));
    check(&"antidisestablishmentarianism".repeat(30));
    check(&"🙂🚀🎉".repeat(30));
    check("Pneumonoultramicroscopicsilicovolcanoconiosis zzzzzzzzzzzzzzzzzz qqxqqxqqx");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn any_text_merges_as_tiktoken_does(text in any::<String>()) {
        check(&text);
    }

    #[test]
    fn letter_runs_merge_as_tiktoken_does(text in "[a-zA-Zé東京データ서울]{1,120}") {
        check(&text);
    }
}
