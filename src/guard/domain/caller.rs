//! Who a call counts as, from the user given and `settings.anonymous`.

use super::policy::{Anonymous, Policy};
use crate::error::Error;

/// Who a call counts as: the user given, which must not be blank; for a call with no user,
/// what `settings.anonymous` says (no one: no limits; refused; or a user id).
pub(crate) fn caller<'a>(
    policy: &'a Policy,
    user: Option<&'a str>,
) -> Result<Option<&'a str>, Error> {
    match (user, &policy.settings.anonymous) {
        (Some(user), _) if user.trim().is_empty() => Err(Error::invalid(
            "user",
            serde_json::Value::from(user),
            "must not be empty or blank; pass None for a call with no user \
             (settings.anonymous decides what such a call may do)",
        )),
        (Some(user), _) => Ok(Some(user)),
        (None, Anonymous::Unlimited) => Ok(None),
        (None, Anonymous::Refuse) => Err(Error::invalid(
            "user",
            "None",
            "is required: this policy refuses calls with no user \
             (settings.anonymous = \"refuse\"); pass the id of the person calling",
        )),
        (None, Anonymous::As(id)) => Ok(Some(id)),
    }
}

/// Refuses a text that a call would write to the ledger (`field`: the argument's name) when
/// it holds a NUL character: PostgreSQL refuses it (in text and in JSON), and one such row
/// would stop every later row behind it. So a call carrying one is refused, as bad input,
/// before anything is counted.
pub(crate) fn storable(field: &str, value: &str) -> Result<(), Error> {
    if !value.as_bytes().contains(&0) {
        return Ok(());
    }
    Err(Error::invalid(
        field,
        serde_json::Value::from(value),
        "must not contain a NUL character (\\u0000): the ledger cannot store it",
    ))
}

/// [`storable`] for what a call is admitted or recorded with: its user, model and
/// attributes (names and values).
pub(crate) fn storable_call(
    user: Option<&str>,
    model: &str,
    attributes: &[(String, String)],
) -> Result<(), Error> {
    storable("model", model)?;
    if let Some(user) = user {
        storable("user", user)?;
    }
    for (key, value) in attributes {
        storable("attributes", key)?;
        storable(&format!("attributes[{key:?}]"), value)?;
    }
    Ok(())
}

/// [`storable`] for every key and string inside a JSON value (a bill's `metadata`, a batch's
/// state).
pub(crate) fn storable_json(field: &str, value: &serde_json::Value) -> Result<(), Error> {
    match value {
        serde_json::Value::String(s) => storable(field, s),
        serde_json::Value::Array(items) => items.iter().try_for_each(|v| storable_json(field, v)),
        serde_json::Value::Object(map) => map.iter().try_for_each(|(k, v)| {
            storable(field, k)?;
            storable_json(field, v)
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::{storable, storable_json};

    #[test]
    fn a_nul_anywhere_is_refused_naming_the_field() {
        assert!(storable("user", "alice").is_ok());
        let e = storable("user", "a\0b").unwrap_err().to_string();
        assert!(e.contains("user") && e.contains("NUL"), "{e}");
        let nested = serde_json::json!({"a": [1, {"b\u{0}": "x"}]});
        assert!(storable_json("metadata", &nested).is_err());
        assert!(storable_json("metadata", &serde_json::json!({"a": ["x", 1]})).is_ok());
    }
}
