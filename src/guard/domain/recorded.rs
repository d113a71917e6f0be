//! What a ledger row records of a call's attributes, and what a recorded row must hold for a
//! generic rule's counter to count it: so the ledger can refill a generic rule's counter after
//! the counter store lost it, and answer it while the store is down.
//!
//! A row records the attributes the policy's generic rules read (`principal` and `model` are
//! the row's `user_id` and `model` columns), as one JSON object: each attribute's value under
//! its word, the least team under `team` and every team under `teams`, the call's scope under
//! `scope` and the scope with its ancestors (at the time of the call) under `scopes`. A row
//! recorded without attributes (before the column existed) matches no attribute condition.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::generic::{Attribute, CallAttributes, GenericRule};

/// Which part of a ledger row a condition reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowField {
    /// The `user_id` column (the call's `principal`).
    User,
    /// The `model` column.
    Model,
    /// A value of the recorded attributes, by key.
    Key(&'static str),
    /// A list of the recorded attributes, by key: any of its items.
    AnyOf(&'static str),
}

/// One condition on a ledger row: the field is one of `values` (or, `negate`d, is not).
/// A field the row lacks is none of the values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowCondition {
    pub field: RowField,
    pub values: Vec<String>,
    pub negate: bool,
}

/// The part of `call` a path (and so its ledger rows) keeps: the attributes a generic rule
/// reads (`used`, a bit per attribute), as the path cache keys them.
pub(crate) fn only_used(call: &CallAttributes, used: u16) -> CallAttributes {
    let read = |a: Attribute| used & (1 << a as u16) != 0;
    let mut out = CallAttributes::default();
    for a in Attribute::ALL {
        if read(a) {
            out.values[a as usize] = call.values[a as usize].clone();
        }
    }
    if read(Attribute::Scope) {
        out.scopes = call.scopes.clone();
    }
    if read(Attribute::Team) {
        out.teams = call.teams.clone();
    }
    out
}

fn strings(list: &[Arc<str>]) -> Value {
    Value::Array(list.iter().map(|s| Value::from(&**s)).collect())
}

/// The JSON object a ledger row records of `call` (`None` when it has nothing to record).
pub(crate) fn row_json(call: &CallAttributes) -> Option<Value> {
    let mut map = Map::new();
    for a in Attribute::ALL {
        if a.from_call() {
            continue; // the row's user_id and model columns
        }
        if let Some(v) = call.get(a) {
            map.insert(a.as_str().into(), Value::from(v));
        }
    }
    if !call.scopes.is_empty() {
        map.insert("scopes".into(), strings(&call.scopes));
    }
    if !call.teams.is_empty() {
        map.insert("teams".into(), strings(&call.teams));
    }
    (!map.is_empty()).then_some(Value::Object(map))
}

/// The field `applies_when` reads for `attr` (a scope's rule counts its descendants' calls;
/// a team's rule any of the call's teams).
fn matched_field(attr: Attribute) -> RowField {
    match attr {
        Attribute::Principal => RowField::User,
        Attribute::Model => RowField::Model,
        Attribute::Scope => RowField::AnyOf("scopes"),
        Attribute::Team => RowField::AnyOf("teams"),
        a => RowField::Key(a.as_str()),
    }
}

/// The field `count_by` reads for `attr` (the call's own scope; the least team).
fn counted_field(attr: Attribute) -> RowField {
    match attr {
        Attribute::Principal => RowField::User,
        Attribute::Model => RowField::Model,
        a => RowField::Key(a.as_str()),
    }
}

fn texts(values: &[Arc<str>]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

/// The conditions a ledger row must meet to count in `rule`'s counter for `call`:
/// `applies_when`, not `applies_unless`, and the `count_by` values of `call` (`None` when
/// the call lacks one: it has no counter).
pub(crate) fn rule_conditions(
    rule: &GenericRule,
    call: &CallAttributes,
) -> Option<Vec<RowCondition>> {
    let mut out = Vec::new();
    for (attr, values) in &rule.applies_when {
        let (field, values) = (matched_field(*attr), texts(values));
        out.push(RowCondition {
            field,
            values,
            negate: false,
        });
    }
    for (attr, values) in &rule.applies_unless {
        let (field, values) = (matched_field(*attr), texts(values));
        out.push(RowCondition {
            field,
            values,
            negate: true,
        });
    }
    for attr in &rule.count_by {
        out.push(RowCondition {
            field: counted_field(*attr),
            values: vec![call.get(*attr)?.to_string()],
            negate: false,
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::domain::policy::Policy;

    fn policy() -> Policy {
        Policy::from_value(&serde_json::json!({
            "models": {"m": {"provider": "openai", "prices": {"input": 1.0, "output": 1.0}}},
            "scopes": {"acme": {}, "eng": {"parent": "acme"}},
            "rules": [{
                "name": "r", "amount": "tokens", "budget": 10, "window": "day",
                "applies_when": {"scope": "acme"}, "applies_unless": {"credential": "ci"},
                "count_by": ["team", "principal"],
            }],
        }))
        .unwrap()
    }

    fn call(policy: &Policy) -> CallAttributes {
        let extra: Vec<(String, String)> = [("scope", "eng"), ("team", "b"), ("team", "a")]
            .into_iter()
            .chain([("session", "s1"), ("credential", "k1")])
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        CallAttributes::of(Some("alice"), "m", None, &extra, &policy.scopes).unwrap()
    }

    #[test]
    fn a_row_records_what_the_rules_read() {
        let policy = policy();
        let kept = only_used(&call(&policy), policy.rule_index.used);
        let json = row_json(&kept).unwrap();
        // session is read by no rule; principal is the row's user_id column.
        let expected = serde_json::json!({
            "scope": "eng", "credential": "k1", "team": "a",
            "scopes": ["eng", "acme"], "teams": ["b", "a"],
        });
        assert_eq!(json, expected);
        assert_eq!(row_json(&CallAttributes::default()), None);
    }

    #[test]
    fn a_rule_counts_rows_by_its_match_and_its_counter_values() {
        let policy = policy();
        let call = call(&policy);
        let conditions = rule_conditions(&policy.rules[0], &call).unwrap();
        let cond = |field, values: &[&str], negate| RowCondition {
            field,
            values: values.iter().map(|v| v.to_string()).collect(),
            negate,
        };
        assert_eq!(
            conditions,
            vec![
                cond(RowField::AnyOf("scopes"), &["acme"], false),
                cond(RowField::Key("credential"), &["ci"], true),
                cond(RowField::Key("team"), &["a"], false),
                cond(RowField::User, &["alice"], false),
            ]
        );
        // A call without a count_by value has no counter.
        let anonymous = CallAttributes::of(None, "m", None, &[], &policy.scopes).unwrap();
        assert_eq!(rule_conditions(&policy.rules[0], &anonymous), None);
    }
}
