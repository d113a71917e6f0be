//! Who owns a counter: the person, team, model or generic rule subject a store may place the
//! counter's keys beside (Redis slot groups, docs/redis.md).

use super::rule::{escape_id, CounterId, Scope};

impl CounterId {
    /// Appends who owns the counter, for a store that places each owner's counters together
    /// (Redis slot groups, docs/redis.md): `u:<user>` for a person's counters (per model, all
    /// models, as a team member), `t:<team>` for a team's shared and total counters,
    /// `m:<model>` for a model's total and public use, `r:<subject>` for a generic rule's (its
    /// identity and `count_by` values). Ids are escaped as in `render`, so the text holds no
    /// brace and two owners never write the same text.
    pub fn write_owner(&self, out: &mut String) {
        let (kind, id) = match self.scope {
            Scope::PersonModel | Scope::PersonAllModels | Scope::TeamMember => ("u:", &self.user),
            Scope::TeamShared | Scope::TeamTotal => ("t:", &self.team),
            Scope::ModelTotal | Scope::PublicShared => ("m:", &self.model),
            Scope::Rule => {
                out.push_str("r:");
                out.push_str(self.subject.as_deref().unwrap_or("-"));
                return;
            }
        };
        out.push_str(kind);
        match id {
            Some(id) => escape_id(id, out),
            None => out.push('-'),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::domain::rule::Metric;
    use crate::guard::domain::window::Window;

    #[test]
    fn a_counter_is_owned_by_its_person_team_model_or_rule_subject() {
        let w = Window::WhileRunning;
        let id = |scope| {
            let (u, t, m) = (
                Some("al{i}ce".into()),
                Some("t1".into()),
                Some("gpt:4".into()),
            );
            CounterId::new(scope, u, t, m, Metric::Tokens, w)
        };
        let owner = |id: &CounterId| {
            let mut out = String::new();
            id.write_owner(&mut out);
            out
        };
        for scope in [
            Scope::PersonModel,
            Scope::PersonAllModels,
            Scope::TeamMember,
        ] {
            assert_eq!(owner(&id(scope)), "u:al%7Bi%7Dce");
        }
        for scope in [Scope::TeamShared, Scope::TeamTotal] {
            assert_eq!(owner(&id(scope)), "t:t1");
        }
        for scope in [Scope::ModelTotal, Scope::PublicShared] {
            assert_eq!(owner(&id(scope)), "m:gpt%3A4");
        }
        let rule = CounterId::rule("r1/k=a%2Cb".into(), Metric::Requests, w);
        assert_eq!(owner(&rule), "r:r1/k=a%2Cb");
        let anonymous = CounterId::new(Scope::ModelTotal, None, None, None, Metric::Cost, w);
        assert_eq!(owner(&anonymous), "m:-");
    }
}
