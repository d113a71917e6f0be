//! The policy: models, teams and limits, validated from a closed vocabulary. Every error of a
//! document is reported at once, each naming the field's path, the value and what is accepted.

mod gateway;
mod gateway_bounds;
mod gateway_keys;
mod gateway_otel;
mod generic_rules;
mod json;
mod limits;
mod models;
pub(crate) mod names;
mod parse;
mod price_book;
mod pricing;
mod restart;
mod rules;
mod scopes;
mod settings;
mod teams;
mod traps;
mod values;
mod window_table;

use std::collections::HashMap;
use std::sync::Arc;

use super::generic::GenericRule;
pub(crate) use super::rule::RuleSpec;
use super::rule_index::RuleIndex;
use crate::error::{Error, FieldError};

#[cfg(feature = "gateway")]
pub(crate) use gateway::{key_digest, GatewayKey};
pub(crate) use gateway::{GatewaySettings, Upstream};
#[cfg(feature = "gateway")]
pub(crate) use gateway_keys::ACCOUNT_HEADERS;
#[cfg(feature = "gateway")]
pub(crate) use gateway_otel::GatewayOtel;
pub(crate) use limits::{DirectLimit, PublicLimit, SubjectLimit, TeamLimit};
pub(crate) use models::{Counting, ModelSpec, Provider};
pub(crate) use price_book::PriceBook;
pub use pricing::{LongContext, PriceOrigin, Prices, Pricing};
pub(crate) use restart::refilled;
pub(crate) use settings::{
    Anonymous, Settings, SpendFailureMode, StoreChecks, UncappedOutput, UnknownModels,
};
pub(crate) use teams::TeamSpec;
pub use values::MAX_AMOUNT;

/// A validated policy. Build it with [`Policy::from_json`], [`Policy::from_toml`] or
/// [`Policy::from_value`]; a policy that exists is valid.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Policy {
    pub models: Vec<Arc<ModelSpec>>,
    pub teams: Vec<TeamSpec>,
    pub direct: Vec<DirectLimit>,
    /// In billing order as written (a team's `priority` reorders at resolution).
    pub team: Vec<TeamLimit>,
    pub public: Vec<PublicLimit>,
    pub team_total: Vec<SubjectLimit>,
    pub model_total: Vec<SubjectLimit>,
    pub user_total: Vec<SubjectLimit>,
    pub platform: Vec<RuleSpec>,
    pub settings: Settings,
    /// The tenancy tree (`[scopes.<id>] parent`): each scope's parent.
    pub scopes: HashMap<Arc<str>, Arc<str>>,
    /// The generic rules (`[[rules]]`), in policy order.
    pub rules: Vec<Arc<GenericRule>>,
    /// The generic rules indexed by the model they require.
    pub rule_index: RuleIndex,
    /// Where each provider's calls go (`[providers.*]`; read by the gateway).
    pub providers: Vec<Upstream>,
    /// The gateway's keys and bounds (`[gateway]`).
    pub gateway: GatewaySettings,
    /// What is valid but probably not meant (an amount of 0, anonymous calls unlimited by
    /// default), each with its path; a policy with warnings works as written.
    pub warnings: Vec<FieldError>,
    /// `settings.prices_file`, read with the policy.
    pub(crate) price_file: Option<Arc<PriceBook>>,
    /// What a reader may take another way than the policy does (a `"1d"` window is a
    /// sliding 24 hours, not the calendar day), each with its path; not warnings.
    pub notes: Vec<FieldError>,
    index: Index,
}

/// Lookups built once at validation so that resolving a path never scans the policy.
#[derive(Debug, Clone, PartialEq, Default)]
struct Index {
    models: HashMap<Arc<str>, usize>,
    names: names::Names,
    teams: HashMap<Arc<str>, usize>,
    teams_of_user: HashMap<Arc<str>, Vec<usize>>,
    direct: HashMap<(Arc<str>, Arc<str>), usize>,
    team_limits_of_model: HashMap<Arc<str>, Vec<usize>>,
    public: HashMap<Arc<str>, usize>,
    team_total: HashMap<Arc<str>, usize>,
    model_total: HashMap<Arc<str>, usize>,
    user_total: HashMap<Arc<str>, usize>,
}

impl Policy {
    /// Validates a policy given as a JSON value (the shape of the TOML document).
    pub fn from_value(value: &serde_json::Value) -> Result<Policy, Error> {
        Self::value_in(value, None)
    }

    /// [`Policy::from_value`], reading a relative `settings.prices_file` from `dir`.
    fn value_in(value: &serde_json::Value, dir: Option<&std::path::Path>) -> Result<Policy, Error> {
        let mut policy = parse::parse(value, dir)?;
        policy.build_index();
        Ok(policy)
    }

    /// Validates a JSON policy document. A key given twice in one table is an error (with its
    /// path), reported with every other error of the document.
    pub fn from_json(text: &str) -> Result<Policy, Error> {
        Self::json_in(text, None)
    }

    fn json_in(text: &str, dir: Option<&std::path::Path>) -> Result<Policy, Error> {
        let (value, repeated) = json::parse_strict(text).map_err(|e| {
            Error::Policy(vec![FieldError::new(
                "",
                "",
                format!("not valid JSON: {e}"),
            )])
        })?;
        match (Self::value_in(&value, dir), repeated.is_empty()) {
            (result, true) => result,
            (Ok(_), false) => Err(Error::Policy(repeated)),
            (Err(Error::Policy(rest)), false) => {
                Err(Error::Policy(repeated.into_iter().chain(rest).collect()))
            }
            (Err(other), false) => Err(other),
        }
    }

    /// Validates a TOML policy document.
    pub fn from_toml(text: &str) -> Result<Policy, Error> {
        Self::toml_in(text, None)
    }

    fn toml_in(text: &str, dir: Option<&std::path::Path>) -> Result<Policy, Error> {
        let value: toml::Value = toml::from_str(text).map_err(|e| {
            let place = e
                .span()
                .map(|span| {
                    let before = &text[..span.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                    format!(" at line {line} column {column}")
                })
                .unwrap_or_default();
            let message = e.message().trim().replace('\n', "; ");
            Error::Policy(vec![FieldError::new(
                "",
                "",
                format!("not valid TOML: {message}{place}"),
            )])
        })?;
        let json = serde_json::to_value(value).map_err(|e| {
            Error::Policy(vec![FieldError::new(
                "",
                "",
                format!("not valid TOML: {e}"),
            )])
        })?;
        Self::value_in(&json, dir)
    }

    /// Reads a policy file: `.toml` as TOML, anything else as JSON; a relative
    /// `settings.prices_file` is read from the policy file's folder.
    pub fn load(path: &std::path::Path) -> Result<Policy, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Policy(vec![FieldError::new(
                "",
                path.display().to_string(),
                format!("cannot read the policy file: {e}"),
            )])
        })?;
        let is_toml = path
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("toml"));
        let dir = path.parent();
        if is_toml {
            Self::toml_in(&text, dir)
        } else {
            Self::json_in(&text, dir)
        }
    }

    fn build_index(&mut self) {
        let mut index = Index::default();
        for (i, m) in self.models.iter().enumerate() {
            index.models.insert(m.id.clone(), i);
        }
        index.names = names::Names::of(self.models.iter().map(|m| (&m.id, &m.aliases[..])));
        for (i, t) in self.teams.iter().enumerate() {
            index.teams.insert(t.id.clone(), i);
            for member in &t.members {
                index
                    .teams_of_user
                    .entry(member.clone())
                    .or_default()
                    .push(i);
            }
        }
        for (i, d) in self.direct.iter().enumerate() {
            index.direct.insert((d.user.clone(), d.model.clone()), i);
        }
        for (i, t) in self.team.iter().enumerate() {
            index
                .team_limits_of_model
                .entry(t.model.clone())
                .or_default()
                .push(i);
        }
        for (i, p) in self.public.iter().enumerate() {
            index.public.insert(p.model.clone(), i);
        }
        for (map, limits) in [
            (&mut index.team_total, &self.team_total),
            (&mut index.model_total, &self.model_total),
            (&mut index.user_total, &self.user_total),
        ] {
            for (i, l) in limits.iter().enumerate() {
                map.insert(l.subject.clone(), i);
            }
        }
        self.index = index;
        self.rule_index = RuleIndex::new(&self.rules);
    }

    /// Whether any limit is defined (a policy of models and teams only limits nothing).
    pub fn has_limits(&self) -> bool {
        !(self.direct.is_empty()
            && self.team.is_empty()
            && self.public.is_empty()
            && self.team_total.is_empty()
            && self.model_total.is_empty()
            && self.user_total.is_empty()
            && self.platform.is_empty()
            && self.rules.is_empty())
    }

    /// The declared model `name` is a name of: its id, an alias, or either with a snapshot
    /// suffix, another letter case or spaces around (see `names`).
    pub fn model(&self, name: &str) -> Option<&Arc<ModelSpec>> {
        let found = self.index.models.get(name).copied();
        found
            .or_else(|| self.index.names.find(name))
            .map(|i| &self.models[i])
    }

    /// The model a call on `name` is admitted as: the declared model it names; for a name the
    /// policy does not declare, `None` when `settings.unknown_models = "allow"`, else the
    /// `model_not_found` refusal (naming only the model asked for).
    pub(crate) fn resolve_model(&self, name: &str) -> Result<Option<Arc<ModelSpec>>, Error> {
        if let Some(spec) = self.model(name) {
            return Ok(Some(spec.clone()));
        }
        match self.settings.unknown_models {
            UnknownModels::Allow => Ok(self.priced_undeclared(name)),
            UnknownModels::Refuse => Err(Error::Refused(Box::new(
                super::refusal::Refusal::model_not_found(name.trim()),
            ))),
        }
    }

    /// An undeclared model the price tables know (`settings.prices_file`, then the built-in
    /// table), as a model entry of that price: its calls count their cost. Its id is the
    /// table's name, so its snapshots and letter cases share its counters.
    fn priced_undeclared(&self, name: &str) -> Option<Arc<ModelSpec>> {
        let books = [self.price_file.as_deref(), Some(price_book::built_in())];
        let entry = books.into_iter().flatten().find_map(|b| b.find(name))?;
        Some(Arc::new(ModelSpec::priced(entry)))
    }

    /// The fallback ladder of `model`: it, then its `fallbacks` in order, each with its
    /// provider (`None` for a model the policy does not list).
    pub fn ladder(&self, model: &str) -> Vec<(String, Option<Provider>)> {
        let provider = |m: &str| self.model(m).map(|s| s.provider);
        let mut out = vec![(model.to_string(), provider(model))];
        for f in self
            .model(model)
            .map(|m| m.fallbacks.as_slice())
            .unwrap_or(&[])
        {
            out.push((f.to_string(), provider(f)));
        }
        out
    }

    /// The team entry.
    pub fn team(&self, id: &str) -> Option<&TeamSpec> {
        self.index.teams.get(id).map(|&i| &self.teams[i])
    }

    /// The ids of the teams `user` is a member of, in the policy's order.
    pub fn teams_of<'a>(&'a self, user: &str) -> impl Iterator<Item = &'a Arc<str>> + 'a {
        let found = self.index.teams_of_user.get(user).map(Vec::as_slice);
        found.unwrap_or(&[]).iter().map(|&i| &self.teams[i].id)
    }

    /// Whether `user` is a member of `team`.
    pub fn is_member(&self, user: &str, team: &str) -> bool {
        self.index
            .teams_of_user
            .get(user)
            .is_some_and(|teams| teams.iter().any(|&i| &*self.teams[i].id == team))
    }

    /// The person's Direct Limit on the model.
    pub fn direct_limit(&self, user: &str, model: &str) -> Option<&DirectLimit> {
        let key = (Arc::<str>::from(user), Arc::<str>::from(model));
        self.index.direct.get(&key).map(|&i| &self.direct[i])
    }

    /// The Team Limits on `model` of the teams `user` is in, in billing order: teams with a
    /// priority first (lowest first), then the order of the policy.
    pub fn team_limits_for(&self, user: &str, model: &str) -> Vec<&TeamLimit> {
        let Some(limits) = self.index.team_limits_of_model.get(model) else {
            return Vec::new();
        };
        let mut found: Vec<(usize, &TeamLimit)> = limits
            .iter()
            .map(|&i| (i, &self.team[i]))
            .filter(|(_, l)| self.is_member(user, &l.team))
            .collect();
        found.sort_by_key(|(i, l)| {
            let priority = self.team(&l.team).and_then(|t| t.priority);
            (priority.is_none(), priority.unwrap_or(0), *i)
        });
        found.into_iter().map(|(_, l)| l).collect()
    }

    /// The model's Public Use Limit.
    pub fn public_limit(&self, model: &str) -> Option<&PublicLimit> {
        self.index.public.get(model).map(|&i| &self.public[i])
    }

    /// The team's Team Total.
    pub fn team_total(&self, team: &str) -> Option<&SubjectLimit> {
        self.index
            .team_total
            .get(team)
            .map(|&i| &self.team_total[i])
    }

    /// The model's Model Total.
    pub fn model_total(&self, model: &str) -> Option<&SubjectLimit> {
        self.index
            .model_total
            .get(model)
            .map(|&i| &self.model_total[i])
    }

    /// The person's User's Total Model Limit.
    pub fn user_total(&self, user: &str) -> Option<&SubjectLimit> {
        self.index
            .user_total
            .get(user)
            .map(|&i| &self.user_total[i])
    }
}
