//! The crate's one error type. The Python layer maps it to one exception hierarchy.

use std::fmt;

use crate::guard::domain::refusal::Refusal;

/// One problem with one field of a document or argument: where, what was given, and what
/// is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path, e.g. `limits.team[2].shared[0].window` (empty for the whole input).
    pub path: String,
    /// The value given, as JSON text (empty when the field is missing).
    pub value: String,
    /// What is wrong and what is accepted.
    pub message: String,
}

impl FieldError {
    /// A field error.
    pub fn new(
        path: impl Into<String>,
        value: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            path: path.into(),
            value: value.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.path.is_empty(), self.value.is_empty()) {
            (true, true) => write!(f, "{}", self.message),
            (true, false) => write!(f, "{} (got {})", self.message, self.value),
            (false, true) => write!(f, "{}: {}", self.path, self.message),
            (false, false) => write!(f, "{}: {} (got {})", self.path, self.message, self.value),
        }
    }
}

/// Everything that can go wrong, from policy validation to a refused call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A policy document is invalid; every problem found is listed.
    #[error("{}", policy_summary(.0))]
    Policy(Vec<FieldError>),
    /// A call was refused (limit reached, does not fit, or limits unavailable).
    #[error("{}", .0.message)]
    Refused(Box<Refusal>),
    /// An argument has an accepted type but an invalid value (Python: `ValueError`).
    #[error("{0}")]
    InvalidArgument(FieldError),
    /// An argument has a type that is not accepted (Python: `TypeError`).
    #[error("{0}")]
    WrongType(FieldError),
    /// The usage ledger could not be opened, written or read (Python: `LedgerError`).
    #[error("{0}")]
    Ledger(String),
}

impl Error {
    /// An invalid-argument error naming the argument, the value and what is accepted.
    pub fn invalid(path: &str, value: impl fmt::Display, message: impl Into<String>) -> Self {
        Error::InvalidArgument(FieldError::new(path, value.to_string(), message))
    }

    /// A wrong-type error naming the argument, what was given and what is accepted.
    pub fn wrong_type(path: &str, given: impl fmt::Display, message: impl Into<String>) -> Self {
        Error::WrongType(FieldError::new(path, given.to_string(), message))
    }
}

fn policy_summary(errors: &[FieldError]) -> String {
    let mut text = format!(
        "the policy has {} error{}:",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" }
    );
    for e in errors {
        text.push_str("\n  ");
        text.push_str(&e.to_string());
    }
    text
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `url` as an error message may show it: a password (`scheme://user:password@host`) is
/// replaced by `***`; anything else is kept as given.
#[cfg_attr(not(any(feature = "postgres", feature = "python")), allow(dead_code))]
pub(crate) fn url_without_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &creds[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::url_without_password;

    #[test]
    fn a_urls_password_is_never_shown() {
        let cases = [
            (
                "redis://:S3cret#1@127.0.0.1:6379/0",
                "redis://:***@127.0.0.1:6379/0",
            ),
            (
                "postgres://app:p@ss@db/usage",
                "postgres://app:***@db/usage",
            ),
            ("rediss://user@host", "rediss://user@host"),
            ("redis://host:6379", "redis://host:6379"),
            ("not a url @ all", "not a url @ all"),
        ];
        for (given, shown) in cases {
            assert_eq!(url_without_password(given), shown, "{given}");
        }
    }
}
