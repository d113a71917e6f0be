//! Generic rules (`[[rules]]`): when a call matches `applies_when`, count its `amount` into a
//! counter per `count_by` value tuple, over a window; past the budget, take the action.
//! They compile to the same counters and path rules as the limit kinds.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use super::rule::{escape_id, RuleSpec};
use crate::error::Error;

/// An attribute of a call (the closed vocabulary of `applies_when` and `count_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Attribute {
    Scope,
    Principal,
    Credential,
    Session,
    Agent,
    Task,
    Model,
    Provider,
    Endpoint,
    Environment,
    RequestFingerprint,
    Team,
    Role,
}

impl Attribute {
    /// Every attribute, in the order the documents list them.
    pub const ALL: [Attribute; 13] = [
        Attribute::Scope,
        Attribute::Principal,
        Attribute::Credential,
        Attribute::Session,
        Attribute::Agent,
        Attribute::Task,
        Attribute::Model,
        Attribute::Provider,
        Attribute::Endpoint,
        Attribute::Environment,
        Attribute::RequestFingerprint,
        Attribute::Team,
        Attribute::Role,
    ];

    /// The policy word; `Display` and `FromStr` use it.
    pub fn as_str(self) -> &'static str {
        match self {
            Attribute::Scope => "scope",
            Attribute::Principal => "principal",
            Attribute::Credential => "credential",
            Attribute::Session => "session",
            Attribute::Agent => "agent",
            Attribute::Task => "task",
            Attribute::Model => "model",
            Attribute::Provider => "provider",
            Attribute::Endpoint => "endpoint",
            Attribute::Environment => "environment",
            Attribute::RequestFingerprint => "request_fingerprint",
            Attribute::Team => "team",
            Attribute::Role => "role",
        }
    }

    /// Whether the call itself gives this attribute (`user` is the principal; the model), so
    /// `attributes=` must not, and a ledger row records it in a column of its own. The
    /// model's provider is not given by `attributes=` either (`checked`), but rows record it
    /// among the attributes.
    pub fn from_call(self) -> bool {
        matches!(self, Attribute::Principal | Attribute::Model)
    }

    /// The words accepted, for errors.
    pub fn words() -> String {
        Attribute::ALL.map(Attribute::as_str).join(", ")
    }
}

/// How many calls may wait in a `throttle` rule's queue unless the rule says.
pub(crate) const THROTTLE_MAX_QUEUE: u64 = 100;

/// What a generic rule does when its counter would pass the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Warn,
    Block,
    Throttle,
    Degrade,
    HaltSession,
}

impl Action {
    /// Every action.
    pub const ALL: [Action; 5] = [
        Action::Warn,
        Action::Block,
        Action::Throttle,
        Action::Degrade,
        Action::HaltSession,
    ];

    /// The policy word; `Display` and `FromStr` use it.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Warn => "warn",
            Action::Block => "block",
            Action::Throttle => "throttle",
            Action::Degrade => "degrade",
            Action::HaltSession => "halt_session",
        }
    }
}

/// One `[[rules]]` entry, compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct GenericRule {
    pub name: Arc<str>,
    /// Each attribute with the values it may take (any of them), sorted by attribute.
    pub applies_when: Vec<(Attribute, Vec<Arc<str>>)>,
    /// Calls with any of these attribute values are not matched (not part of the counter's
    /// identity: the rule keeps its counter when the list changes).
    pub applies_unless: Vec<(Attribute, Vec<Arc<str>>)>,
    /// The attributes whose values key one counter each, in the order written.
    pub count_by: Vec<Attribute>,
    /// The amount (metric), the budget and the window.
    pub spec: RuleSpec,
    pub action: Action,
    /// Soft thresholds, fractions of the budget in (0, 1], ascending.
    pub warn_at: Vec<f64>,
    pub degrade_to: Option<Arc<str>>,
    pub action_duration_seconds: Option<u64>,
    pub throttle_max_wait_ms: u64,
    /// How many calls may wait in a `throttle` rule's queue (per counter) at once.
    pub throttle_max_queue: u64,
    /// The counter identity shared by rules alike (`applies_when` and `count_by`, escaped).
    identity: String,
}

impl GenericRule {
    /// A rule; its identity is computed from `applies_when` and `count_by`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: Arc<str>,
        mut applies_when: Vec<(Attribute, Vec<Arc<str>>)>,
        count_by: Vec<Attribute>,
        spec: RuleSpec,
        action: Action,
        warn_at: Vec<f64>,
        degrade_to: Option<Arc<str>>,
        action_duration_seconds: Option<u64>,
        throttle_max_wait_ms: u64,
    ) -> Self {
        applies_when.sort_by_key(|(a, _)| *a);
        for (_, values) in &mut applies_when {
            values.sort();
            values.dedup();
        }
        let mut identity = String::new();
        for (attr, values) in &applies_when {
            let _ = write!(identity, "{}=", attr.as_str());
            for (i, v) in values.iter().enumerate() {
                if i > 0 {
                    identity.push('+');
                }
                escape_id(v, &mut identity);
            }
            identity.push(',');
        }
        identity.push('/');
        for attr in &count_by {
            let _ = write!(identity, "{},", attr.as_str());
        }
        GenericRule {
            name,
            applies_when,
            applies_unless: Vec::new(),
            count_by,
            spec,
            action,
            warn_at,
            degrade_to,
            action_duration_seconds,
            throttle_max_wait_ms,
            throttle_max_queue: THROTTLE_MAX_QUEUE,
            identity,
        }
    }

    /// Whether the call's attributes match `applies_when` (every attribute named has one of
    /// its values; an absent attribute matches nothing).
    pub fn matches(&self, call: &CallAttributes) -> bool {
        let has = |(attr, values): &(Attribute, Vec<Arc<str>>)| match attr {
            // A parent scope's rule counts its children's calls.
            Attribute::Scope => call.scopes.iter().any(|s| values.contains(s)),
            // A call may be made for several teams (a gateway key's `teams`): any matches.
            Attribute::Team => (call.teams.iter().map(|t| &**t))
                .chain(call.get(Attribute::Team))
                .any(|t| values.iter().any(|w| **w == *t)),
            _ => call
                .get(*attr)
                .is_some_and(|v| values.iter().any(|w| **w == *v)),
        };
        self.applies_when.iter().all(has) && !self.applies_unless.iter().any(has)
    }

    /// The counter subject of this rule for a call: its identity and the `count_by` values
    /// (escaped), or `None` when the call lacks a `count_by` attribute (it is not counted).
    pub fn subject(&self, call: &CallAttributes) -> Option<String> {
        let mut out = self.identity.clone();
        out.push('/');
        for attr in &self.count_by {
            escape_id(call.get(*attr)?, &mut out);
            out.push(',');
        }
        Some(out)
    }

    /// The attributes the rule reads (what a cached path must be keyed on).
    pub fn attributes(&self) -> impl Iterator<Item = Attribute> + '_ {
        self.applies_when
            .iter()
            .chain(&self.applies_unless)
            .map(|(a, _)| *a)
            .chain(self.count_by.iter().copied())
    }
}

/// The subject of the halt counter of a `halt_session` rule's counter `subject` on `session`.
pub(crate) fn halt_subject(subject: &str, session: &str) -> String {
    let mut out = format!("halt/{subject}/");
    escape_id(session, &mut out);
    out
}

/// The attributes of one call: `principal`, `model` and `provider` from the call, the rest
/// from `attributes=`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallAttributes {
    pub(crate) values: [Option<Arc<str>>; 13],
    /// The call's scope and its ancestors in the policy's tenancy tree.
    pub(crate) scopes: Vec<Arc<str>>,
    /// Every `team` given (`count_by` reads the least, alphabetically).
    pub(crate) teams: Vec<Arc<str>>,
}

impl CallAttributes {
    /// The value of `attr`, if the call has one.
    pub fn get(&self, attr: Attribute) -> Option<&str> {
        self.values[attr as usize].as_deref()
    }

    /// Sets `attr` (an empty value is no value).
    pub fn set(&mut self, attr: Attribute, value: &str) {
        self.values[attr as usize] = (!value.is_empty()).then(|| Arc::from(value));
    }

    /// The attributes of a call by `user` (none: an anonymous call, with no `principal`) on
    /// `model` (of `provider`), with the caller's `extra` ones; an unknown attribute, or one
    /// the call itself gives, is refused.
    pub fn of(
        user: Option<&str>,
        model: &str,
        provider: Option<&str>,
        extra: &[(String, String)],
        scopes: &HashMap<Arc<str>, Arc<str>>,
    ) -> Result<CallAttributes, Error> {
        let mut call = CallAttributes::default();
        if let Some(user) = user {
            call.set(Attribute::Principal, user);
        }
        call.set(Attribute::Model, model);
        if let Some(p) = provider {
            call.set(Attribute::Provider, p);
        }
        for (key, value) in extra {
            let attr = checked(key, value)?;
            if attr != Attribute::Team {
                call.set(attr, value);
            } else if !value.is_empty() {
                call.teams.push(Arc::from(value.as_str()));
            }
        }
        // The least team, as the path cache keys the teams sorted.
        if let Some(team) = call.teams.iter().min().cloned() {
            call.set(Attribute::Team, &team);
        }
        if let Some(scope) = call.get(Attribute::Scope) {
            call.scopes = ancestors(scopes, scope);
        }
        Ok(call)
    }
}

impl CallAttributes {
    /// The teams of the caller's policy membership, as the call's `team` when it gives
    /// none itself (a `team` rule then counts every member's calls).
    pub fn default_teams<'a>(&mut self, teams: impl Iterator<Item = &'a Arc<str>>) {
        if !self.teams.is_empty() {
            return;
        }
        self.teams.extend(teams.cloned());
        if let Some(team) = self.teams.iter().min().cloned() {
            self.set(Attribute::Team, &team);
        }
    }
}

/// The part of a path cache key the caller's `extra` attributes make: those any rule reads
/// (`used`, a bit per attribute), sorted; each attribute is checked as `CallAttributes::of`
/// checks it.
pub(crate) fn cache_suffix(extra: &[(String, String)], used: u16) -> Result<String, Error> {
    let mut parts: Vec<(Attribute, &str)> = Vec::new();
    for (key, value) in extra {
        let attr = checked(key, value)?;
        if used & (1 << attr as u16) != 0 && !value.is_empty() {
            parts.push((attr, value));
        }
    }
    parts.sort_unstable();
    let mut out = String::new();
    for (attr, value) in parts {
        // Lengths make the key unambiguous whatever bytes the values hold.
        let _ = write!(out, "\u{1f}{}:{}:{value}", attr as u16, value.len());
    }
    Ok(out)
}

/// The attribute `key` names, when the caller may give it.
fn checked(key: &str, value: &str) -> Result<Attribute, Error> {
    match key.parse::<Attribute>().ok() {
        None => {
            let words = Attribute::words();
            let why = format!("is not an attribute; accepted: {words}");
            Err(Error::invalid("attributes", key, why))
        }
        // The provider is the model's (its policy `provider`): a caller naming another
        // would step out of every rule that applies by provider.
        Some(a) if a.from_call() || a == Attribute::Provider => {
            let why = "comes from the call (principal is the user argument, model the model \
                       argument, provider the model's policy provider); remove it from \
                       attributes";
            Err(Error::invalid(&format!("attributes[{key:?}]"), value, why))
        }
        Some(a) => Ok(a),
    }
}

/// `scope` and its ancestors, nearest first (stops after a loop's length).
pub(crate) fn ancestors(parents: &HashMap<Arc<str>, Arc<str>>, scope: &str) -> Vec<Arc<str>> {
    let mut out: Vec<Arc<str>> = vec![Arc::from(scope)];
    let mut at = scope;
    while let Some(parent) = parents.get(at) {
        out.push(parent.clone());
        if out.len() > parents.len() + 1 {
            break;
        }
        at = parent;
    }
    out
}

super::words::words!(Attribute, Action);
