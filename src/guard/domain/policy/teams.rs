//! The `teams` section: each team's members, display name and billing priority.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::values::{key_path, kind, Parser};

/// A team and its members.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamSpec {
    pub id: Arc<str>,
    pub display_name: String,
    pub members: Vec<Arc<str>>,
    /// Teams with a priority are billed first, lowest number first.
    pub priority: Option<i64>,
}

impl Parser {
    /// The `teams` table, in the document's order.
    pub(super) fn teams(&mut self, value: &Value) -> Vec<TeamSpec> {
        let Value::Object(map) = value else {
            self.error(
                "teams",
                Some(value),
                format!("must be a table of teams, not {}", kind(value)),
            );
            return Vec::new();
        };
        let mut teams = Vec::new();
        for (id, entry) in map {
            let path = key_path("teams", id);
            if id.trim().is_empty() {
                self.error(&path, None, "a team id must not be empty or blank");
                continue;
            }
            let accepted = ["members", "display_name", "priority"];
            if let Some(fields) = self.table(&path, entry, &accepted) {
                teams.push(self.team(&path, id, fields));
            }
        }
        teams
    }

    fn team(&mut self, path: &str, id: &str, fields: &Map<String, Value>) -> TeamSpec {
        let members = match self.required(path, fields, "members") {
            Some(list) => self.members(&key_path(path, "members"), list),
            None => Vec::new(),
        };
        let display_name = match fields.get("display_name") {
            Some(v) => self
                .string(&key_path(path, "display_name"), v)
                .unwrap_or_default(),
            None => id.to_string(),
        };
        let priority = fields.get("priority").and_then(|v| {
            let n = v.as_i64();
            if n.is_none() {
                self.error(
                    &key_path(path, "priority"),
                    Some(v),
                    "must be a whole number",
                );
            }
            n
        });
        TeamSpec {
            id: Arc::from(id),
            display_name,
            members,
            priority,
        }
    }

    /// The members list: non-empty names, each once.
    fn members(&mut self, path: &str, list: &Value) -> Vec<Arc<str>> {
        let mut members = Vec::new();
        let mut seen = HashSet::new();
        for (i, m) in self.list(path, list).iter().enumerate() {
            let p = format!("{path}[{i}]");
            if let Some(user) = self.string(&p, m) {
                if seen.insert(user.clone()) {
                    members.push(Arc::from(user));
                } else {
                    self.error(&p, Some(m), "is listed twice");
                }
            }
        }
        members
    }
}
