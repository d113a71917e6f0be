//! `reported_usage`: the usage a provider reported, read by the core's provider modules from
//! an SDK response or stream event. Only the parts at [`usage_paths`] are converted, never the
//! answer itself; `answer_text`: the output text of a plain answer, for when that usage is
//! missing or unreadable.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{Map, Value};

use super::json::py_to_json;
use super::provider::Provider;
use crate::ceiling::{answer_text as read_text, reported_usage as read_usage, usage_paths};

/// `obj[key]` for a mapping, else `obj.key`; `None` when absent or `None`.
fn child<'py>(obj: &Bound<'py, PyAny>, key: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    let found = if let Ok(d) = obj.cast::<PyDict>() {
        d.get_item(key)?
    } else {
        obj.getattr(key).ok()
    };
    Ok(found.filter(|v| !v.is_none()))
}

/// Sets `value` at `path` in `root`, making the objects on the way.
fn put(root: &mut Map<String, Value>, path: &[&str], value: Value) {
    let (last, parents) = path.split_last().expect("usage paths are never empty");
    let mut at = root;
    for key in parents {
        let entry = at
            .entry(key.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        at = entry.as_object_mut().expect("made an object above");
    }
    at.insert(last.to_string(), value);
}

/// The usage `response` (an SDK object or a dict: a response, or the stream event carrying
/// the final usage) reports for `provider`, as `{input_tokens, output_tokens,
/// cached_input_tokens, reasoning_tokens}` (input includes cached; output includes
/// reasoning); `None` when it carries none.
#[pyfunction]
fn reported_usage<'py>(
    py: Python<'py>,
    response: &Bound<'py, PyAny>,
    provider: Provider,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    super::errors::caught("reported_usage", || {
        let mut carried = Map::new();
        for path in usage_paths(provider.0) {
            let mut at = Some(response.clone());
            for key in path.iter() {
                at = match at {
                    Some(obj) => child(&obj, key)?,
                    None => break,
                };
            }
            if let Some(found) = at {
                put(&mut carried, path, py_to_json(&found, "response")?);
            }
        }
        let Some(u) = read_usage(&Value::Object(carried), provider.0) else {
            return Ok(None);
        };
        let out = PyDict::new(py);
        out.set_item("input_tokens", u.input_tokens)?;
        out.set_item("output_tokens", u.output_tokens)?;
        out.set_item("cached_input_tokens", u.cached_input_tokens)?;
        out.set_item("reasoning_tokens", u.reasoning_tokens)?;
        Ok(Some(out))
    })
}

/// The output text (answers, thinking, tool call arguments) of `response`, a plain answer of
/// `provider` as JSON values (a dict): what the adapters count when its usage is missing or
/// unreadable. Empty for embeddings.
#[pyfunction]
fn answer_text(response: &Bound<'_, PyAny>, provider: Provider) -> PyResult<String> {
    super::errors::caught("answer_text", || {
        let value = py_to_json(response, "response")?;
        Ok(read_text(&value, provider.0))
    })
}

/// Adds `reported_usage` and `answer_text` to `_core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(reported_usage, m)?)?;
    m.add_function(wrap_pyfunction!(answer_text, m)?)
}
