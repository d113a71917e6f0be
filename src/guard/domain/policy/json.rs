//! Reads JSON policy text, reporting every key given twice in one table with its path: plain
//! JSON parsing keeps the last and silently drops the first (a `"limits"` given twice loses a
//! limit). TOML parsing refuses duplicates on its own.

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::values::key_path;
use crate::error::FieldError;

/// The document (a repeated key keeps its last value) and one error per repeated key.
pub(super) fn parse_strict(text: &str) -> Result<(Value, Vec<FieldError>), serde_json::Error> {
    let repeated = RefCell::new(Vec::new());
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Node {
        path: String::new(),
        repeated: &repeated,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok((value, repeated.into_inner()))
}

/// One value of the document at `path`.
struct Node<'r> {
    path: String,
    repeated: &'r RefCell<Vec<FieldError>>,
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Value, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let item = Node {
                path: format!("{}[{}]", self.path, items.len()),
                repeated: self.repeated,
            };
            match seq.next_element_seed(item)? {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = key_path(&self.path, &key);
            let value = map.next_value_seed(Node {
                path: path.clone(),
                repeated: self.repeated,
            })?;
            if out.insert(key, value).is_some() {
                self.repeated.borrow_mut().push(FieldError::new(
                    path,
                    "",
                    "is given twice in one table; JSON parsers keep only the last, so give it once",
                ));
            }
        }
        Ok(Value::Object(out))
    }
}
