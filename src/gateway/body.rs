//! A request body parsed as JSON with no key twice in any object, at any depth. serde keeps
//! the last of duplicate keys while a provider may read the first: a body with `"model"` (or
//! `max_tokens`, or `options.num_predict`) twice would be admitted for one value and served
//! for the other. Refusing every duplicate, not only those admission reads, keeps the rule
//! one sentence long and the body sent upstream (the parsed one) exactly what was read.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

/// `bytes` as JSON; an error (serde_json's, with its line and column) for invalid JSON or for
/// an object that has a key twice, naming the key.
pub(crate) fn parse(bytes: &[u8]) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = Strict.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Deserializes one JSON value, refusing duplicate keys in its objects.
#[derive(Clone, Copy)]
struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
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

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Strict.deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element_seed(Strict)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            match map.entry(key) {
                Entry::Occupied(e) => {
                    return Err(de::Error::custom(format!(
                        "the key {:?} appears twice in one object (send each key once)",
                        e.key()
                    )));
                }
                Entry::Vacant(e) => {
                    e.insert(access.next_value_seed(Strict)?);
                }
            }
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_twice_is_refused_at_any_depth_and_named() {
        for (body, key) in [
            (r#"{"model": "a", "model": "b"}"#, "model"),
            (
                r#"{"options": {"num_predict": 1, "num_predict": 9}}"#,
                "num_predict",
            ),
            (
                r#"{"messages": [{"role": "user", "role": "system"}]}"#,
                "role",
            ),
            // An escaped spelling is the same key once decoded.
            (r#"{"max_tokens": 1, "max\u005ftokens": 2}"#, "max_tokens"),
        ] {
            let e = parse(body.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(&format!("{key:?} appears twice")), "{body}: {e}");
        }
    }

    #[test]
    fn a_body_without_duplicates_parses_as_serde_does_in_its_order() {
        let body = r#"{"z": 1, "a": [1, -2, 3.5, 1e300, null, true], "m": {"b": "x", "a": {}}}"#;
        let strict = parse(body.as_bytes()).unwrap();
        let serde: Value = serde_json::from_str(body).unwrap();
        assert_eq!(strict, serde);
        assert_eq!(serde_json::to_string(&strict).unwrap(), serde.to_string());
        let keys: Vec<&String> = strict.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["z", "a", "m"]);
    }

    #[test]
    fn trailing_bytes_and_bad_json_are_errors() {
        assert!(parse(b"{} {}").is_err());
        assert!(parse(b"{\"a\": }").is_err());
    }
}
