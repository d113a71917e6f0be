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
