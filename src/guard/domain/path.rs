//! A person's path on a model: the ceilings that are always checked, the sources in billing
//! order (the first with a limit defined is billed), and every counter the call may touch.

use std::collections::HashMap;
use std::sync::Arc;

use super::generic::{halt_subject, Action, Attribute, CallAttributes, GenericRule};
use super::policy::names;
use super::policy::{DirectLimit, ModelSpec, Policy, PublicLimit, TeamLimit, TeamSpec};
use super::refusal::Refusal;
use super::rule::Metric;
use super::rule::RuleSpec;
use super::rule::{CounterId, LimitType, Scope};
use super::window::Window;
use crate::error::Error;

pub use super::source::{SourceKind, SourceRef};

/// One rule on the path, bound to the counter it counts into (`slot` in `Path::counters`).
#[derive(Debug, Clone, PartialEq)]
pub struct PathRule {
    pub limit_type: LimitType,
    pub rule: RuleSpec,
    pub slot: usize,
    /// The team of a team, each-member or team-total rule.
    pub team: Option<Arc<str>>,
    /// That team's display name (empty for other rules).
    pub team_name: Arc<str>,
    /// Each-member / each-person rules count the person's own use.
    pub per_person: bool,
    /// The generic rule (`[[rules]]`) this is, for `LimitType::Rule`.
    pub generic: Option<Arc<GenericRule>>,
}

/// A `halt_session` rule on a call with a session: its halt counter's slot. A halt is a hold
/// on that counter, of the halt's end in seconds, expiring on its own.
#[derive(Debug, Clone, PartialEq)]
pub struct Halt {
    pub rule: Arc<GenericRule>,
    pub slot: usize,
}

/// A billing source with a limit defined, and the rules checked when it is billed
/// (for a team, its Team Limit and its Team Total).
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub source: SourceRef,
    pub rules: Vec<PathRule>,
}

/// A person's resolved path on a model.
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    pub user: Option<Arc<str>>,
    pub model: Arc<str>,
    pub model_spec: Option<Arc<ModelSpec>>,
    /// Checked on every call (Model Total, User's Total, Platform, and the generic rules
    /// that can refuse).
    pub ceilings: Vec<PathRule>,
    /// Generic rules that count and only report (action `warn`, or any in shadow mode):
    /// their counters are added to, never checked.
    pub watched: Vec<PathRule>,
    /// Billing order: direct, the person's teams with a team limit on the model, public use.
    pub sources: Vec<Source>,
    /// The person's own counters on the model, added to whichever source is billed.
    pub personal: Vec<usize>,
    /// `halt_session` rules bound to the session's halt counter (read, never added to).
    pub halts: Vec<Halt>,
    /// Every distinct counter of the path; rules refer to these by slot.
    pub counters: Vec<Arc<CounterId>>,
    /// Billed when no source has a limit defined.
    pub default_source: SourceRef,
    /// The call's attributes a generic rule reads (the path cache's key): what its ledger
    /// rows record, and what a generic rule's counter is refilled by.
    pub attributes: CallAttributes,
}

impl Path {
    /// The model's name as users read it.
    pub fn display_name(&self) -> &str {
        self.model_spec
            .as_ref()
            .map(|m| m.display_name.as_str())
            .unwrap_or(&self.model)
    }

    /// Whether no rule applies anywhere: such a call never touches the counters.
    pub fn is_unlimited(&self) -> bool {
        self.counters.is_empty()
    }

    /// Every rule of the path that a call billed to `source` must fit in.
    pub fn checked_rules(&self, source: Option<usize>) -> impl Iterator<Item = &PathRule> {
        let billed = source
            .map(|i| self.sources[i].rules.as_slice())
            .unwrap_or(&[]);
        self.ceilings.iter().chain(billed)
    }

    /// The counter slots a call billed to `source` adds to: the ceilings, the source (and its
    /// team total), and the person's own counters, each once.
    pub fn added_slots(&self, source: Option<usize>) -> Vec<usize> {
        let billed = source.map_or(0, |i| self.sources[i].rules.len());
        let n = self.ceilings.len() + billed + self.personal.len() + self.watched.len();
        let mut slots: Vec<usize> = Vec::with_capacity(n);
        slots.extend(self.checked_rules(source).map(|r| r.slot));
        slots.extend(self.personal.iter().copied());
        slots.extend(self.watched.iter().map(|r| r.slot));
        slots.sort_unstable();
        slots.dedup();
        slots
    }
}

/// Builds a path: binds each rule to its counter, one slot per distinct counter.
struct Builder {
    user: Option<Arc<str>>,
    model: Arc<str>,
    router: bool,
    slots: HashMap<Arc<CounterId>, usize>,
    counters: Vec<Arc<CounterId>>,
    personal: Vec<usize>,
    generic_ceilings: Vec<PathRule>,
    halts: Vec<Halt>,
}

impl Builder {
    /// The slot of counter `id`, added on its first use.
    fn slot(&mut self, id: CounterId) -> usize {
        let id = Arc::new(id);
        if let Some(&slot) = self.slots.get(&id) {
            return slot;
        }
        let slot = self.counters.len();
        self.counters.push(id.clone());
        self.slots.insert(id, slot);
        slot
    }

    /// Binds the rules of one limit to their counters, into `out`. A router's own call
    /// skips the counters that span models.
    fn rules(
        &mut self,
        out: &mut Vec<PathRule>,
        limit_type: LimitType,
        scope: Scope,
        rules: &[RuleSpec],
        team: Option<&TeamSpec>,
    ) {
        if self.router && scope.spans_models() {
            return;
        }
        let per_person = matches!(
            scope,
            Scope::TeamMember | Scope::PersonModel | Scope::PersonAllModels
        );
        for rule in rules {
            let id = CounterId::new(
                scope,
                per_person.then(|| self.user.clone()).flatten(),
                matches!(
                    scope,
                    Scope::TeamShared | Scope::TeamMember | Scope::TeamTotal
                )
                .then(|| team.map(|t| t.id.clone()))
                .flatten(),
                (!scope.spans_models()).then(|| self.model.clone()),
                rule.metric,
                rule.window,
            );
            let slot = self.slot(id);
            if matches!(scope, Scope::PersonModel) {
                self.personal.push(slot);
            }
            out.push(PathRule {
                limit_type,
                rule: rule.clone(),
                slot,
                team: team.map(|t| t.id.clone()),
                team_name: team
                    .map(|t| Arc::from(t.display_name.as_str()))
                    .unwrap_or_else(|| Arc::from("")),
                per_person,
                generic: None,
            });
        }
    }

    /// Model Total, User's Total and the Platform limit: checked on every call.
    fn ceilings(&mut self, policy: &Policy, user: &str) -> Vec<PathRule> {
        let mut out = Vec::new();
        if let Some(limit) = policy.model_total(&self.model) {
            let (kind, scope) = (LimitType::ModelTotal, Scope::ModelTotal);
            self.rules(&mut out, kind, scope, &limit.rules, None);
        }
        if let Some(limit) = policy.user_total(user) {
            let (kind, scope) = (LimitType::UserTotal, Scope::PersonAllModels);
            self.rules(&mut out, kind, scope, &limit.rules, None);
        }
        let (kind, scope) = (LimitType::Platform, Scope::PersonAllModels);
        self.rules(&mut out, kind, scope, &policy.platform, None);
        out
    }

    /// The generic rules that match the call, each bound to its counter (one per `count_by`
    /// value tuple): into the ceilings when they can refuse, else into `watched`.
    fn generic(&mut self, policy: &Policy, call: &CallAttributes) -> Vec<PathRule> {
        let mut watched = Vec::new();
        for i in policy.rule_index.candidates(&self.model) {
            let rule = &policy.rules[i];
            let Some(subject) = rule.subject(call).filter(|_| rule.matches(call)) else {
                continue;
            };
            let spec = &rule.spec;
            let halt = call
                .get(Attribute::Session)
                .filter(|_| rule.action == Action::HaltSession && !policy.settings.shadow)
                .map(|session| halt_subject(&subject, session));
            let slot = self.slot(CounterId::rule(subject.into(), spec.metric, spec.window));
            if let Some(halt) = halt {
                let id = CounterId::rule(halt.into(), Metric::Concurrency, Window::WhileRunning);
                let (rule, slot) = (rule.clone(), self.slot(id));
                self.halts.push(Halt { rule, slot });
            }
            let bound = PathRule {
                limit_type: LimitType::Rule,
                rule: spec.clone(),
                slot,
                team: None,
                team_name: Arc::from(""),
                per_person: false,
                generic: Some(rule.clone()),
            };
            if policy.settings.shadow || rule.action == Action::Warn {
                watched.push(bound);
            } else {
                self.generic_ceilings.push(bound);
            }
        }
        watched
    }

    /// The sources with a limit defined, in billing order: direct, teams, public use.
    fn sources(&mut self, policy: &Policy, user: &Arc<str>, public: &SourceRef) -> Vec<Source> {
        let mut sources = Vec::new();
        if let Some(limit) = policy.direct_limit(user, &self.model) {
            sources.push(self.direct_source(user, limit));
        }
        for limit in policy.team_limits_for(user, &self.model) {
            sources.push(self.team_source(policy, limit));
        }
        if let Some(limit) = policy.public_limit(&self.model) {
            sources.push(self.public_source(public, limit));
        }
        sources
    }

    /// The person's Direct Limit as a source.
    fn direct_source(&mut self, user: &Arc<str>, limit: &DirectLimit) -> Source {
        let mut rules = Vec::new();
        let (kind, scope) = (LimitType::Direct, Scope::PersonModel);
        self.rules(&mut rules, kind, scope, &limit.rules, None);
        let source = SourceRef {
            kind: SourceKind::Direct,
            id: user.clone(),
        };
        Source { source, rules }
    }

    /// A team as a source: its Team Limit (shared and each member) and its Team Total.
    fn team_source(&mut self, policy: &Policy, limit: &TeamLimit) -> Source {
        let team = policy.team(&limit.team);
        let mut rules = Vec::new();
        let kind = LimitType::Team;
        self.rules(&mut rules, kind, Scope::TeamShared, &limit.shared, team);
        self.rules(
            &mut rules,
            kind,
            Scope::TeamMember,
            &limit.each_member,
            team,
        );
        if let Some(total) = policy.team_total(&limit.team) {
            let (kind, scope) = (LimitType::TeamTotal, Scope::TeamTotal);
            self.rules(&mut rules, kind, scope, &total.rules, team);
        }
        let source = SourceRef {
            kind: SourceKind::Team,
            id: limit.team.clone(),
        };
        Source { source, rules }
    }

    /// The model's Public Use Limit as a source (shared and each person).
    fn public_source(&mut self, public: &SourceRef, limit: &PublicLimit) -> Source {
        let mut rules = Vec::new();
        let kind = LimitType::Public;
        self.rules(&mut rules, kind, Scope::PublicShared, &limit.shared, None);
        self.rules(
            &mut rules,
            kind,
            Scope::PersonModel,
            &limit.each_person,
            None,
        );
        Source {
            source: public.clone(),
            rules,
        }
    }
}

/// Resolves the path of `user` on `model`. A call with no user (the caller maps it first,
/// see [`caller`]) has no limit kind; the generic rules that match it apply.
pub(crate) fn resolve(
    policy: &Policy,
    user: Option<&str>,
    model: &str,
    attributes: &[(String, String)],
) -> Result<Path, Error> {
    // Every name of a declared model counts as that model; an undeclared one (allowed) as
    // its plain name, so that letter case and spaces do not make another counter.
    let model_spec = policy.resolve_model(model)?;
    let model: Arc<str> = model_spec
        .as_ref()
        .map(|m| m.id.clone())
        .unwrap_or_else(|| Arc::from(names::base(model)));
    let default_source = SourceRef {
        kind: SourceKind::Public,
        id: model.clone(),
    };
    let provider = model_spec.as_ref().map(|m| m.provider.as_str());
    let mut call = CallAttributes::of(user, &model, provider, attributes, &policy.scopes)?;
    if let Some(user) = user {
        // A rule on `team` counts its members' calls; a call's own `team` attribute wins.
        call.default_teams(policy.teams_of(user));
    }
    let mut b = Builder {
        user: user.map(Arc::from),
        model: model.clone(),
        router: model_spec.as_ref().is_some_and(|m| m.router),
        slots: HashMap::new(),
        counters: Vec::new(),
        personal: Vec::new(),
        generic_ceilings: Vec::new(),
        halts: Vec::new(),
    };
    // No user: no limit kind applies; the generic rules that match the call do.
    let user = b.user.clone();
    let mut ceilings = match &user {
        Some(user) => b.ceilings(policy, user),
        None => Vec::new(),
    };
    let watched = b.generic(policy, &call);
    ceilings.append(&mut b.generic_ceilings);
    let sources = match &user {
        Some(user) => b.sources(policy, user, &default_source),
        None => Vec::new(),
    };
    let mut personal = std::mem::take(&mut b.personal);
    personal.sort_unstable();
    personal.dedup();
    let path = Path {
        user,
        model,
        model_spec,
        ceilings,
        watched,
        sources,
        personal,
        halts: b.halts,
        counters: b.counters,
        default_source,
        attributes: super::recorded::only_used(&call, policy.rule_index.used),
    };
    priced_if_costed(path)
}

/// The path, unless a cost rule is on it and its model has no price: an undeclared model
/// (allowed) that no price table knows, whose cost the rule could not count.
fn priced_if_costed(path: Path) -> Result<Path, Error> {
    let priced = path
        .model_spec
        .as_ref()
        .is_some_and(|m| m.prices.is_priced());
    let costed = path.counters.iter().any(|c| c.metric == Metric::Cost);
    if priced || !costed {
        return Ok(path);
    }
    let message = format!(
        "The model {:?} has no known price, and a cost limit counts its calls: it is not \
         available here until the policy gives its prices.",
        &*path.model
    );
    let refusal = Refusal {
        message,
        ..Refusal::model_not_found(&path.model)
    };
    Err(Error::Refused(Box::new(refusal)))
}
