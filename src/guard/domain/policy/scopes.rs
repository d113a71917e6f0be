//! The `scopes` section: a tenancy tree, `[scopes.<id>] parent = "<id>"`. A generic rule
//! whose `applies_when` names a scope matches calls of that scope and of every scope below it.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::values::{key_path, kind, Parser};
use crate::guard::domain::generic::ancestors;

impl Parser {
    /// The tree as child → parent (roots have none), every parent a defined scope, no loop.
    pub(super) fn scopes(&mut self, value: &Value) -> HashMap<Arc<str>, Arc<str>> {
        let Value::Object(map) = value else {
            let why = format!("must be a table of scopes, not {}", kind(value));
            self.error("scopes", Some(value), why);
            return HashMap::new();
        };
        let mut parents = HashMap::new();
        for (id, entry) in map {
            let path = key_path("scopes", id);
            let Some(fields) = self.table(&path, entry, &["parent"]) else {
                continue;
            };
            let Some(parent) = fields.get("parent") else {
                continue;
            };
            let parent_path = key_path(&path, "parent");
            let Some(parent_id) = self.string(&parent_path, parent) else {
                continue;
            };
            if !map.contains_key(&parent_id) {
                let mut ids: Vec<&str> = map.keys().map(String::as_str).collect();
                ids.sort_unstable();
                let why = format!(
                    "is not a scope of the policy; defined scopes: {}",
                    ids.join(", ")
                );
                self.error(&parent_path, Some(parent), why);
                continue;
            }
            parents.insert(Arc::from(id.as_str()), Arc::from(parent_id));
        }
        for id in parents.keys() {
            if ancestors(&parents, id).len() > parents.len() + 1 {
                let why = "the parents loop back to this scope; a scope tree has no loops";
                self.error(&key_path(&key_path("scopes", id), "parent"), None, why);
            }
        }
        parents
    }
}
