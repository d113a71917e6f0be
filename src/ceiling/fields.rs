//! Reading and writing request fields in place by path; where each provider keeps its fields
//! is in `providers`.

use serde_json::{Map, Value};

use crate::error::{Error, Result};

pub(crate) fn get<'a>(request: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(request, |v, k| v.get(*k))
        .filter(|v| !v.is_null())
}

pub(crate) fn set(request: &mut Value, path: &[&str], value: Value) {
    let mut at = request;
    for key in &path[..path.len() - 1] {
        let obj = at
            .as_object_mut()
            .expect("request objects are checked before writing");
        let entry = obj
            .entry(key.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        at = entry;
    }
    if let Some(obj) = at.as_object_mut() {
        obj.insert(path[path.len() - 1].to_string(), value);
    }
}

/// Reads a count field: a non-negative integer, or (`allow_negative`, Ollama's `-1`/`-2`
/// meaning "no limit") a negative one read as absent.
pub(crate) fn read_count(
    request: &Value,
    path: &[&str],
    allow_negative: bool,
) -> Result<Option<u64>> {
    let Some(v) = get(request, path) else {
        return Ok(None);
    };
    if let Some(n) = v.as_u64() {
        return Ok(Some(n));
    }
    if allow_negative && v.as_i64().is_some_and(|n| n < 0) {
        return Ok(None);
    }
    if let Some(f) = v.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0) {
        return Ok(Some(f as u64));
    }
    Err(field_error(
        &format!("request.{}", path.join(".")),
        v,
        if allow_negative {
            "must be an integer (negative for no limit)"
        } else {
            "must be a non-negative integer"
        },
    ))
}

/// An invalid-argument error naming the request field at `path`, its value (shortened to 80
/// characters) and what is accepted.
pub(crate) fn field_error(path: &str, value: &Value, accepted: &str) -> Error {
    let mut shown = value.to_string();
    if shown.len() > 80 {
        let cut = (0..=80)
            .rev()
            .find(|&i| shown.is_char_boundary(i))
            .unwrap_or(0);
        shown.truncate(cut);
        shown.push('…');
    }
    Error::invalid(path, shown, accepted)
}

/// The list of messages in `request`'s `field`, or an error naming the field.
pub(crate) fn messages<'a>(request: &'a Value, field: &str) -> Result<&'a [Value]> {
    match request.get(field) {
        Some(Value::Array(items)) => Ok(items),
        Some(v) => Err(field_error(
            &format!("request.{field}"),
            v,
            "must be a list of messages",
        )),
        None => Err(Error::invalid(
            &format!("request.{field}"),
            "",
            "is required; a list of messages",
        )),
    }
}
