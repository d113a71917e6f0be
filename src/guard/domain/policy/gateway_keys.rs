//! The gateway's API keys (`[gateway.keys.<label>]`): who each key's calls are made as.
//! A plain key written in the policy is hashed here and never kept.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{Error, FieldError};

use super::gateway::{key_digest, GatewayKey, GatewaySettings};
use super::values::{key_path, kind, Parser};
use crate::guard::domain::generic::Attribute;

/// The attributes a key's `attributes` table may set (the generic rules' vocabulary, less
/// what the key's own fields and the call give).
const KEY_ATTRIBUTES: [Attribute; 7] = [
    Attribute::Scope,
    Attribute::Session,
    Attribute::Agent,
    Attribute::Task,
    Attribute::Environment,
    Attribute::RequestFingerprint,
    Attribute::Role,
];

pub(super) const KEY_KEYS: [&str; 7] = [
    "key",
    "principal",
    "credential",
    "teams",
    "attributes",
    "models",
    "pass_headers",
];

/// Caller headers that choose the operator's provider account: its organization or project
/// (who is invoiced) or its beta features (what is billed). The gateway drops them unless the
/// key's `pass_headers` lists them.
pub(crate) const ACCOUNT_HEADERS: [&str; 4] = [
    "openai-organization",
    "openai-project",
    "openai-beta",
    "anthropic-beta",
];

fn is_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Parser {
    pub(super) fn keys(
        &mut self,
        value: &Value,
        teams: &HashSet<String>,
        models: &HashSet<String>,
        settings: &mut GatewaySettings,
    ) {
        let Value::Object(map) = value else {
            self.error(
                "gateway.keys",
                Some(value),
                format!("must be a table of keys, not {}", kind(value)),
            );
            return;
        };
        for (name, entry) in map {
            let path = key_path("gateway.keys", name);
            let Some(fields) = self.table(&path, entry, &KEY_KEYS) else {
                continue;
            };
            let Some(key) = self.key(&path, name, fields, teams, models) else {
                continue;
            };
            if settings.by_digest.contains_key(&key.sha256) {
                self.error(&path, None, "is the same key as another entry");
                continue;
            }
            settings
                .by_digest
                .insert(key.sha256.clone(), settings.keys.len());
            settings.keys.push(key);
        }
    }

    pub(super) fn key(
        &mut self,
        path: &str,
        name: &str,
        fields: &Map<String, Value>,
        teams: &HashSet<String>,
        models: &HashSet<String>,
    ) -> Option<GatewayKey> {
        let sha256 = match fields.get("key") {
            Some(v) => self
                .string(&key_path(path, "key"), v)
                .map(|k| key_digest(&k)),
            None if is_digest(name) => Some(name.to_ascii_lowercase()),
            None => {
                self.error(
                    path,
                    None,
                    "is neither a key's SHA-256 digest (64 hex digits) nor a label with \
                     `key = \"...\"` (the plain key, hashed when the policy is read)",
                );
                None
            }
        };
        let principal = self
            .required(path, fields, "principal")
            .and_then(|v| self.string(&key_path(path, "principal"), v));
        let credential = fields
            .get("credential")
            .and_then(|v| self.string(&key_path(path, "credential"), v));
        let key_teams = match fields.get("teams") {
            Some(v) => self.ids(&key_path(path, "teams"), v, teams, "team"),
            None => Vec::new(),
        };
        let key_models = fields
            .get("models")
            .map(|v| self.ids(&key_path(path, "models"), v, models, "model"));
        let attributes = fields
            .get("attributes")
            .map(|v| self.attributes(&key_path(path, "attributes"), v))
            .unwrap_or_default();
        let pass_headers = fields
            .get("pass_headers")
            .map(|v| self.pass_headers(&key_path(path, "pass_headers"), v))
            .unwrap_or_default();
        Some(GatewayKey {
            sha256: sha256?,
            label: name.to_string(),
            principal: Arc::from(principal?),
            credential,
            teams: key_teams,
            attributes,
            models: key_models,
            pass_headers,
        })
    }

    /// A key's `pass_headers`: names of [`ACCOUNT_HEADERS`], in any letter case.
    fn pass_headers(&mut self, path: &str, value: &Value) -> Vec<String> {
        let mut out = Vec::new();
        for (i, item) in self.list(path, value).iter().enumerate() {
            let at = format!("{path}[{i}]");
            let Some(name) = self.string(&at, item) else {
                continue;
            };
            let name = name.to_ascii_lowercase();
            if ACCOUNT_HEADERS.contains(&name.as_str()) {
                if !out.contains(&name) {
                    out.push(name);
                }
                continue;
            }
            let why = format!(
                "is not a header a key may pass on (the others are the gateway's to set or \
                 drop); accepted: {}",
                ACCOUNT_HEADERS.join(", ")
            );
            self.error(&at, Some(item), why);
        }
        out
    }

    /// A list of ids, each one the policy defines.
    fn ids(
        &mut self,
        path: &str,
        value: &Value,
        known: &HashSet<String>,
        what: &str,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for (i, item) in self.list(path, value).iter().enumerate() {
            if let Some(id) = self.reference(&format!("{path}[{i}]"), item, known, what) {
                out.push(id.to_string());
            }
        }
        out
    }

    fn attributes(&mut self, path: &str, value: &Value) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Value::Object(map) = value else {
            self.error(
                path,
                Some(value),
                format!("must be a table of strings, not {}", kind(value)),
            );
            return out;
        };
        for (name, v) in map {
            let at = key_path(path, name);
            let Some(text) = self.string(&at, v) else {
                continue;
            };
            if name
                .parse::<Attribute>()
                .is_ok_and(|a| KEY_ATTRIBUTES.contains(&a))
            {
                out.insert(name.clone(), text);
                continue;
            }
            let words: Vec<&str> = KEY_ATTRIBUTES.iter().map(|a| a.as_str()).collect();
            let why = format!(
                "is not an attribute a key sets{} (principal, credential and teams are the key's \
                 own fields; model, provider and endpoint come from the call); accepted: {}",
                crate::guard::domain::suggest::hint(name, &words),
                words.join(", ")
            );
            self.error(&at, Some(v), why);
        }
        out
    }
}

impl super::Policy {
    /// This policy with the gateway key `label` added, or replaced, by `entry` (the fields
    /// of a `[gateway.keys.<label>]` table), checked as the policy checks its keys; every
    /// error when it is not valid (the policy is unchanged either way: set the one returned).
    pub fn with_gateway_key(&self, label: &str, entry: &Value) -> Result<super::Policy, Error> {
        let mut parser = Parser::new();
        let path = key_path("gateway.keys", label);
        let teams: HashSet<String> = self.teams.iter().map(|t| t.id.to_string()).collect();
        let models: HashSet<String> = self.models.iter().map(|m| m.id.to_string()).collect();
        let key = parser
            .table(&path, entry, &KEY_KEYS)
            .and_then(|fields| parser.key(&path, label, fields, &teams, &models));
        let (key, _) = parser.finish(key)?;
        let key = key.ok_or_else(|| Error::invalid(&path, "", "is not a key entry"))?;
        let mut keys: Vec<GatewayKey> = self.gateway.keys.clone();
        keys.retain(|k| k.label != label);
        if keys.iter().any(|k| k.sha256 == key.sha256) {
            let message = "is the same key as another entry";
            return Err(Error::Policy(vec![FieldError::new(path, "", message)]));
        }
        keys.push(key);
        let mut policy = self.clone();
        policy.gateway.set_keys(keys);
        Ok(policy)
    }

    /// This policy without the gateway key `label`; `None` when it has no such key.
    pub fn without_gateway_key(&self, label: &str) -> Option<super::Policy> {
        let mut keys = self.gateway.keys.clone();
        keys.retain(|k| k.label != label);
        if keys.len() == self.gateway.keys.len() {
            return None;
        }
        let mut policy = self.clone();
        policy.gateway.set_keys(keys);
        Some(policy)
    }
}
