//! The policy words of the enums whose every value has one: `Display` writes a value's word,
//! `FromStr` reads it back. Each enum keeps one `as_str` (the word, without allocating) and,
//! where it can be read back, an `ALL` list; the traits derive from those two, so a word is
//! written in one place.

use std::fmt;

/// A word that names none of a type's values. What the caller accepts (and so the message
/// a user sees) is the caller's: it lists the words in its own terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownWord;

impl fmt::Display for UnknownWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not one of the accepted words")
    }
}

impl std::error::Error for UnknownWord {}

/// `Display` through the type's `as_str`.
macro_rules! display_as_str {
    ($($t:ty),* $(,)?) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}

/// `Display` through `as_str`, and `FromStr` as the value of `ALL` whose `as_str` is the word.
macro_rules! words {
    ($($t:ty),* $(,)?) => {$(
        $crate::guard::domain::words::display_as_str!($t);

        impl std::str::FromStr for $t {
            type Err = $crate::guard::domain::words::UnknownWord;

            fn from_str(word: &str) -> Result<Self, Self::Err> {
                <$t>::ALL
                    .into_iter()
                    .find(|value| value.as_str() == word)
                    .ok_or($crate::guard::domain::words::UnknownWord)
            }
        }
    )*};
}

pub(crate) use display_as_str;
pub(crate) use words;
