//! Python values as JSON, converted without recursion: a request, a policy document or bill
//! metadata of any depth or shape (even one that contains itself) can never exhaust the
//! stack of the converting thread. Values nested deeper than [`MAX_DEPTH`] are refused.

use pyo3::prelude::*;
use pyo3::types::iter::BoundDictIterator;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyIterator, PyList, PyString, PyTuple, PyType};
use serde_json::{Map, Value};

use super::pystr::utf8;
use crate::error::Error;

/// How deep a value may nest (dicts and lists inside each other). Deeper input, and any
/// value that contains itself, is refused with a `ValueError` naming the argument.
pub(crate) const MAX_DEPTH: usize = 64;

/// A Python value (dicts with string keys, lists, tuples, str, int, float, bool, None, and
/// objects with `model_dump` / `to_dict`) as JSON. `path` names the value in errors.
pub(crate) fn py_to_json(value: &Bound<'_, PyAny>, path: &str) -> PyResult<Value> {
    to_json(value, path, false)
}

/// Like [`py_to_json`], but a NaN or infinite float becomes its text ("nan", "inf"), and an
/// int past 64 bits a float (past a float's range, its text), so that a document validator
/// reports it with the document's other errors.
pub(crate) fn py_to_json_document(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    to_json(value, "", true)
}

/// A container being converted: what is done so far and where its next item comes from.
/// Paths are not built as the walk goes (that was a string per value): an error renders
/// the path of where it happened from the open containers (see [`path_at`]).
enum Open<'py> {
    Dict {
        map: Map<String, Value>,
        items: BoundDictIterator<'py>,
        /// The key of the item being converted.
        key: String,
    },
    List {
        items: Vec<Value>,
        iter: Bound<'py, PyIterator>,
    },
}

impl<'py> Open<'py> {
    fn accept(&mut self, value: Value) {
        match self {
            Open::Dict { map, key, .. } => {
                map.insert(std::mem::take(key), value);
            }
            Open::List { items, .. } => items.push(value),
        }
    }

    /// The next item to convert; `None` when the container is done.
    fn next_item(&mut self) -> Result<Option<Bound<'py, PyAny>>, Stop<'py>> {
        match self {
            Open::Dict { items, key, .. } => {
                let Some((k, v)) = items.next() else {
                    return Ok(None);
                };
                let Ok(k) = k.cast::<PyString>() else {
                    return Err(Stop::KeyNotStr(k.get_type()));
                };
                *key = utf8(k).map_err(Stop::KeyNotUtf8)?.into_owned();
                Ok(Some(v))
            }
            Open::List { iter, .. } => match iter.next() {
                None => Ok(None),
                Some(item) => item.map(Some).map_err(Stop::Py),
            },
        }
    }

    fn finish(self) -> Value {
        match self {
            Open::Dict { map, .. } => Value::Object(map),
            Open::List { items, .. } => Value::Array(items),
        }
    }
}

/// Why a container's next item could not be taken.
enum Stop<'py> {
    Py(PyErr),
    /// A dict key of this type (not a string): reported with the dict's path.
    KeyNotStr(Bound<'py, PyType>),
    /// A dict key with a lone surrogate (CPython's encoding error).
    KeyNotUtf8(PyErr),
}

/// The refusal of a `str` with a lone surrogate (no UTF-8 form), at `path`; `error` is
/// CPython's encoding error, which says where.
fn not_utf8(path: &str, error: &PyErr) -> PyErr {
    Error::invalid(
        path,
        error,
        "must be text without lone surrogates; accepted: a str that encodes as UTF-8",
    )
    .into()
}

/// The path of the value being converted inside `open` (the containers from the root down),
/// the root named `root`: `request.messages[3].content`.
fn path_at(root: &str, open: &[Open<'_>]) -> String {
    let mut path = root.to_string();
    for container in open {
        match container {
            Open::Dict { key, .. } => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
            }
            Open::List { items, .. } => path.push_str(&format!("[{}]", items.len())),
        }
    }
    path
}

fn to_json(root: &Bound<'_, PyAny>, path: &str, non_finite_as_text: bool) -> PyResult<Value> {
    let mut open: Vec<Open<'_>> = Vec::new();
    let mut value = root.clone();
    // SDK models dumped so far: bounded too, in case one dumps to itself.
    let mut dumps = 0;
    loop {
        // Either a converted value to hand to its container, or a container just opened.
        let at = || path_at(path, &open);
        let mut finished = match scalar(&value, &at, non_finite_as_text)? {
            Some(converted) => Some(converted),
            None => {
                if open.len() >= MAX_DEPTH || dumps > MAX_DEPTH {
                    return Err(too_deep(&at()));
                }
                match container(&value, &at)? {
                    Ok(started) => {
                        open.push(started);
                        None
                    }
                    Err(dumped) => {
                        dumps += 1;
                        value = dumped;
                        continue;
                    }
                }
            }
        };
        loop {
            let Some(top) = open.last_mut() else {
                return Ok(finished.expect("the root value is converted"));
            };
            if let Some(converted) = finished.take() {
                top.accept(converted);
            }
            match top.next_item() {
                Ok(Some(item)) => {
                    value = item;
                    break;
                }
                Ok(None) => finished = Some(open.pop().expect("an open container").finish()),
                Err(Stop::Py(e)) => return Err(e),
                Err(Stop::KeyNotStr(given)) => {
                    // The dict's own path: without its key's segment.
                    open.pop();
                    let at = path_at(path, &open);
                    return Err(Error::wrong_type(&at, given, "keys must be strings").into());
                }
                Err(Stop::KeyNotUtf8(e)) => {
                    open.pop();
                    return Err(not_utf8(&path_at(path, &open), &e));
                }
            }
        }
    }
}

/// A converted scalar; `None` for a container (or an object that dumps to one).
/// `at` renders the value's path, for an error.
fn scalar(
    value: &Bound<'_, PyAny>,
    at: &dyn Fn() -> String,
    non_finite_as_text: bool,
) -> PyResult<Option<Value>> {
    if value.is_none() {
        return Ok(Some(Value::Null));
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Some(Value::Bool(b.is_true())));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(n) = value.extract::<i64>() {
            return Ok(Some(Value::from(n)));
        }
        if let Ok(n) = value.extract::<u64>() {
            return Ok(Some(Value::from(n)));
        }
        if non_finite_as_text {
            // A document's validator says what the field accepts, with its other errors
            // (a PolicyError): the number as a float, or past a float's range its text.
            let as_float = value.extract::<f64>().ok().filter(|f| f.is_finite());
            return Ok(Some(
                match as_float.and_then(serde_json::Number::from_f64) {
                    Some(n) => Value::Number(n),
                    None => Value::String(value.str()?.to_string()),
                },
            ));
        }
        return Err(Error::invalid(&at(), value, "is too large a number").into());
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        let f = f.value();
        if non_finite_as_text && !f.is_finite() {
            return Ok(Some(Value::String(f.to_string())));
        }
        return serde_json::Number::from_f64(f)
            .map(|n| Some(Value::Number(n)))
            .ok_or_else(|| Error::invalid(&at(), f, "must be a finite number").into());
    }
    if let Ok(s) = value.cast::<PyString>() {
        let text = utf8(s).map_err(|e| not_utf8(&at(), &e))?;
        return Ok(Some(Value::String(text.into_owned())));
    }
    Ok(None)
}

/// A dict, list or tuple opened for conversion; or, for an SDK model, what it dumps to
/// (`Err`, to convert in its place); or a type error (`at` renders the value's path).
fn container<'py>(
    value: &Bound<'py, PyAny>,
    at: &dyn Fn() -> String,
) -> PyResult<Result<Open<'py>, Bound<'py, PyAny>>> {
    if let Ok(d) = value.cast::<PyDict>() {
        return Ok(Ok(Open::Dict {
            map: Map::with_capacity(d.len()),
            items: d.iter(),
            key: String::new(),
        }));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        return Ok(Ok(Open::List {
            items: Vec::with_capacity(value.len().unwrap_or(0)),
            iter: value.try_iter()?,
        }));
    }
    for method in ["model_dump", "to_dict"] {
        if value.hasattr(method)? {
            return Ok(Err(value.call_method0(method)?));
        }
    }
    Err(Error::wrong_type(
        &at(),
        value.get_type(),
        "cannot use this type here; accepted: dict, list, str, int, float, bool, None",
    )
    .into())
}

/// The refusal of a value nested too deep, named by its first path segment (the argument,
/// or the document's section) and showing where.
fn too_deep(path: &str) -> PyErr {
    let argument = path.split(['.', '[']).next().filter(|a| !a.is_empty());
    let shown: String = path.chars().take(60).collect();
    Error::invalid(
        argument.unwrap_or("document"),
        format!("{} levels at {shown}…", MAX_DEPTH + 1),
        format!(
            "nests deeper than {MAX_DEPTH} levels (or contains itself); \
             accepted: dicts and lists nested at most {MAX_DEPTH} deep"
        ),
    )
    .into()
}
