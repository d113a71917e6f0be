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
            map.insert(a.word().into(), Value::from(v));
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
        a => RowField::Key(a.word()),
    }
}

/// The field `count_by` reads for `attr` (the call's own scope; the least team).
fn counted_field(attr: Attribute) -> RowField {
    match attr {
        Attribute::Principal => RowField::User,
        Attribute::Model => RowField::Model,
        a => RowField::Key(a.word()),
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
