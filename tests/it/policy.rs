//! Policy validation: a closed vocabulary, every error at once, each with path and value.

use usage_guard::{Error, Policy};

fn errors(toml: &str) -> Vec<String> {
    match Policy::from_toml(toml) {
        Err(Error::Policy(errors)) => errors.iter().map(|e| e.to_string()).collect(),
        Err(other) => panic!("expected policy errors, got {other}"),
        Ok(_) => panic!("expected policy errors, the policy was accepted"),
    }
}

#[test]
fn every_error_of_a_document_is_reported_at_once() {
    let found = errors(
        r#"
[models.gpt-5]
provider = "openia"

[teams.research]
members = ["alice"]

[[limits.team]]
team = "research"
model = "gpt-5"
each_member = [{ metric = "requests", amount = 5, window = "minute" }]

[[limits.team]]
team = "research"
model = "gpt-6"
each_member = [{ metric = "requests", amount = 5, window = "minute" }]

[[limits.team]]
team = "research"
model = "gpt-5"
shared = [{ metric = "tokens", amount = 10, window = "fortnight" }]
"#,
    );
    assert_eq!(
        found,
        vec![
            "models.gpt-5.provider: is not a provider (did you mean \"openai\"?); accepted: openai, anthropic, gemini, ollama, other (got \"openia\")",
            "limits.team[1].model: is not a model of the policy; defined models: gpt-5 (got \"gpt-6\")",
            "limits.team[2].shared[0].window: is not a window; accepted: day, week, month, year (calendar, UTC); minute, hour, or a number and a unit: \"10 minutes\", \"24 hours\", \"30 days\", \"2 weeks\", or short: \"60s\", \"10m\", \"24h\", \"30d\", \"2w\" (sliding) (got \"fortnight\")",
            "limits.team[2]: a team limit for research on gpt-5 is already defined at limits.team[0]",
        ]
    );
}

#[test]
fn amounts_are_whole_numbers_and_cost_is_dollars() {
    let found = errors(
        r#"
[[limits.user_total]]
user = "alice"
rules = [
  { metric = "tokens", amount = 10.5, window = "day" },
  { metric = "cost", amount = -1, window = "day" },
  { metric = "concurrency", amount = 2, window = "day" },
  { metric = "requests", amount = 5, window = "minute", action = "warn" },
]
"#,
    );
    assert_eq!(
        found,
        vec![
            "limits.user_total[0].rules[0].amount: must be a whole number from 0 to 9007199254740992 (got 10.5)",
            "limits.user_total[0].rules[1].amount: must be an amount of cost: a number of dollars, 0 or more (got -1)",
            "limits.user_total[0].rules[2].window: a concurrency rule has no window; remove it (got \"day\")",
            "limits.user_total[0].rules[3].action: unknown key; accepted: metric, amount, window",
        ]
    );
    let p = Policy::from_toml(
        "[[limits.user_total]]\nuser = \"a\"\nrules = [{ metric = \"cost\", amount = 20.25, window = \"week\" }]\n",
    )
    .unwrap();
    assert_eq!(p.user_total[0].rules[0].amount, 20_250_000);
}

#[test]
fn json_and_toml_documents_agree() {
    let toml = Policy::from_toml(
        "[models.m]\nprices = { input = 1.5, output = 2 }\n[limits.platform]\nrules = [{ metric = \"requests\", amount = 3, window = \"10 minutes\" }]\n",
    )
    .unwrap();
    let json = Policy::from_json(
        r#"{"models": {"m": {"prices": {"input": 1.5, "output": 2}}}, "limits": {"platform": {"rules": [{"metric": "requests", "amount": 3, "window": "10 minutes"}]}}}"#,
    )
    .unwrap();
    assert_eq!(toml, json);
    assert_eq!(
        toml.models[0].prices.base.cached_input, 1_500_000,
        "cached input defaults to input"
    );
}

#[test]
fn a_json_key_given_twice_is_an_error_with_its_path() {
    let text = r#"{"limits": {"direct": [{"user": "mallory", "model": "m", "rules": [{"metric": "tokens", "amount": 150, "window": "day"}]}]},
                   "models": {"m": {}},
                   "limits": {"platform": {"rules": [{"metric": "requests", "amount": 9, "window": "hour"}]}}}"#;
    let found: Vec<String> = match Policy::from_json(text) {
        Err(Error::Policy(errors)) => errors.iter().map(|e| e.to_string()).collect(),
        other => panic!("expected policy errors, got {other:?}"),
    };
    assert_eq!(
        found,
        vec![
            "limits: is given twice in one table; JSON parsers keep only the last, so give it once"
        ]
    );
}

#[test]
fn a_valid_policy_carries_its_warnings() {
    let p = Policy::from_toml(
        "[models.m]\nprices = { input = 1, output = 1 }\n[settings]\nanonymous = \"refuse\"\n[[limits.user_total]]\nuser = \"a\"\nrules = [{ metric = \"cost\", amount = 0, window = \"week\" }]\n",
    )
    .unwrap();
    let warnings: Vec<String> = p.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        warnings,
        vec!["limits.user_total[0].rules[0].amount: is 0: every call this rule counts is refused (got 0)"]
    );
}
