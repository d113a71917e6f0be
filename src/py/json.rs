//! Python values as JSON, converted without recursion: a request, a policy document or bill
//! metadata of any depth or shape (even one that contains itself) can never exhaust the
//! stack of the converting thread. Values nested deeper than [`MAX_DEPTH`] are refused.

use pyo3::prelude::*;
use pyo3::types::iter::BoundDictIterator;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyIterator, PyList, PyString, PyTuple};
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

/// Like [`py_to_json`], but a NaN or infinite float becomes its text ("nan", "inf"), so that
/// a document validator reports it with the document's other errors.
pub(crate) fn py_to_json_document(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    to_json(value, "", true)
}

/// A container being converted: what is done so far and where its next item comes from.
enum Open<'py> {
    Dict {
        map: Map<String, Value>,
        items: BoundDictIterator<'py>,
        key: String,
        path: String,
    },
    List {
        items: Vec<Value>,
        iter: Bound<'py, PyIterator>,
        path: String,
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

    /// The next item to convert and its path; `None` when the container is done.
    fn next_item(&mut self) -> PyResult<Option<(Bound<'py, PyAny>, String)>> {
        match self {
            Open::Dict {
                items, key, path, ..
            } => {
                let Some((k, v)) = items.next() else {
                    return Ok(None);
                };
                let k = k
                    .cast::<PyString>()
                    .map_err(|_| Error::wrong_type(path, k.get_type(), "keys must be strings"))?;
                *key = utf8(k)?.into_owned();
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                Ok(Some((v, child)))
            }
            Open::List { items, iter, path } => match iter.next() {
                None => Ok(None),
                Some(item) => Ok(Some((item?, format!("{path}[{}]", items.len())))),
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

fn to_json(root: &Bound<'_, PyAny>, path: &str, non_finite_as_text: bool) -> PyResult<Value> {
    let mut open: Vec<Open<'_>> = Vec::new();
    let mut value = root.clone();
    let mut at = path.to_string();
    // SDK models dumped so far: bounded too, in case one dumps to itself.
    let mut dumps = 0;
    loop {
        // Either a converted value to hand to its container, or a container just opened.
        let mut finished = match scalar(&value, &at, non_finite_as_text)? {
            Some(converted) => Some(converted),
            None => {
                if open.len() >= MAX_DEPTH || dumps > MAX_DEPTH {
                    return Err(too_deep(&at));
                }
                match container(&value, at)? {
                    Ok(started) => {
                        open.push(started);
                        None
                    }
                    Err((dumped, dumped_at)) => {
                        dumps += 1;
                        value = dumped;
                        at = dumped_at;
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
            match top.next_item()? {
                Some((item, item_at)) => {
                    value = item;
                    at = item_at;
                    break;
                }
                None => finished = Some(open.pop().expect("an open container").finish()),
            }
        }
    }
}

/// A converted scalar; `None` for a container (or an object that dumps to one).
fn scalar(
    value: &Bound<'_, PyAny>,
    path: &str,
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
        return Err(Error::invalid(path, value, "is too large a number").into());
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        let f = f.value();
        if non_finite_as_text && !f.is_finite() {
            return Ok(Some(Value::String(f.to_string())));
        }
        return serde_json::Number::from_f64(f)
            .map(|n| Some(Value::Number(n)))
            .ok_or_else(|| Error::invalid(path, f, "must be a finite number").into());
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Some(Value::String(utf8(s)?.into_owned())));
    }
    Ok(None)
}

/// A dict, list or tuple opened for conversion; or, for an SDK model, what it dumps to
/// (`Err`, to convert in its place); or a type error.
#[allow(clippy::type_complexity)]
fn container<'py>(
    value: &Bound<'py, PyAny>,
    path: String,
) -> PyResult<Result<Open<'py>, (Bound<'py, PyAny>, String)>> {
    if let Ok(d) = value.cast::<PyDict>() {
        return Ok(Ok(Open::Dict {
            map: Map::with_capacity(d.len()),
            items: d.iter(),
            key: String::new(),
            path,
        }));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        return Ok(Ok(Open::List {
            items: Vec::new(),
            iter: value.try_iter()?,
            path,
        }));
    }
    for method in ["model_dump", "to_dict"] {
        if value.hasattr(method)? {
            return Ok(Err((value.call_method0(method)?, path)));
        }
    }
    Err(Error::wrong_type(
        &path,
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
