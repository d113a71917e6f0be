//! The index of a policy's generic rules: resolving a call reads only the rules that can
//! match its model.

use std::collections::HashMap;
use std::sync::Arc;

use super::generic::{Action, Attribute, GenericRule};

/// The generic rules of a policy, indexed so that resolving a call reads the rules that can
/// match it: by the model they require (or any model), never every rule defined.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuleIndex {
    by_model: HashMap<Arc<str>, Vec<usize>>,
    any_model: Vec<usize>,
    /// A bit per attribute any rule reads.
    pub used: u16,
    /// Whether any rule's action is `degrade` (admission then keeps the request to retry).
    pub degrades: bool,
    /// Whether any rule's action is `throttle`.
    pub throttles: bool,
}

impl RuleIndex {
    /// The index of `rules`.
    pub fn new(rules: &[Arc<GenericRule>]) -> Self {
        let mut index = RuleIndex::default();
        for (i, rule) in rules.iter().enumerate() {
            for attr in rule.attributes() {
                index.used |= 1 << attr as u16;
            }
            index.degrades |= rule.action == Action::Degrade;
            index.throttles |= rule.action == Action::Throttle;
            match rule
                .applies_when
                .iter()
                .find(|(a, _)| *a == Attribute::Model)
            {
                Some((_, models)) => {
                    for m in models {
                        index.by_model.entry(m.clone()).or_default().push(i);
                    }
                }
                None => index.any_model.push(i),
            }
        }
        index
    }

    /// The rules that may match a call on `model`, in policy order.
    pub fn candidates(&self, model: &str) -> Vec<usize> {
        let mut out = self.any_model.clone();
        if let Some(rules) = self.by_model.get(model) {
            out.extend(rules);
            out.sort_unstable();
        }
        out
    }
}
