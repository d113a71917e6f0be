//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod events;
pub mod redis_server;

use std::sync::Arc;

use usage_guard::parse_iso8601;
use usage_guard::{AdmitRequest, Error, Guard, ManualClock, MemoryStore, Policy, Reason, Refusal};

/// The key of `user`'s gpt-5 tokens counter (person and model) in `window`'s bucket
/// starting at `bucket`.
pub fn tokens_key(
    user: &str,
    window: usage_guard::Window,
    bucket: i64,
) -> usage_guard::internals::CounterKey {
    use usage_guard::{CounterId, Metric, Scope};
    usage_guard::internals::CounterKey {
        id: Arc::new(CounterId::new(
            Scope::PersonModel,
            Some(Arc::from(user)),
            None,
            Some(Arc::from("gpt-5")),
            Metric::Tokens,
            window,
        )),
        bucket,
    }
}

/// `tokens_key` with the window given in words (`Window`'s `FromStr`).
pub fn tokens_key_in(user: &str, window: &str, bucket: i64) -> usage_guard::internals::CounterKey {
    tokens_key(user, window.parse::<usage_guard::Window>().unwrap(), bucket)
}

/// A hook a test's store or ledger runs once, the next time it reaches a step (`run`): to
/// interleave another call exactly there.
#[derive(Default)]
pub struct OnceHook(std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl OnceHook {
    /// Runs `hook` at the next `run`.
    pub fn set(&self, hook: impl FnOnce() + Send + 'static) {
        *self.0.lock().unwrap() = Some(Box::new(hook));
    }

    /// Runs the hook set, if any (once).
    pub fn run(&self) {
        let hook = self.0.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
    }
}

pub fn at(text: &str) -> i64 {
    parse_iso8601(text).unwrap()
}

pub fn policy(toml: &str) -> Policy {
    Policy::from_toml(toml).unwrap_or_else(|e| panic!("{e}"))
}

pub struct Setup {
    pub guard: Guard,
    pub clock: Arc<ManualClock>,
    pub store: Arc<MemoryStore>,
}

pub fn setup(toml: &str, now: &str) -> Setup {
    let clock = Arc::new(ManualClock::new(at(now)));
    let store = Arc::new(MemoryStore::new());
    let guard = Guard::new(policy(toml), store.clone(), clock.clone());
    Setup {
        guard,
        clock,
        store,
    }
}

pub fn call(user: &str, model: &str, prompt: u64, max_out: u64) -> AdmitRequest {
    AdmitRequest {
        user: Some(user.to_string()),
        model: model.to_string(),
        prompt_tokens: Some(prompt),
        prompt_is_estimate: false,
        max_output_tokens: Some(max_out),
        request: None,
        attributes: Vec::new(),
    }
}

pub fn refusal(result: Result<usage_guard::Ticket, Error>) -> Refusal {
    match result {
        Err(Error::Refused(r)) => *r,
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(t) => panic!("expected a refusal, got a ticket from {:?}", t.source()),
    }
}

pub fn reached(result: Result<usage_guard::Ticket, Error>) -> Refusal {
    let r = refusal(result);
    assert_eq!(r.reason, Reason::LimitReached, "{}", r.message);
    r
}

/// A refusal because calls in progress hold the room, not because it is used.
#[allow(dead_code)]
pub fn held(result: Result<usage_guard::Ticket, Error>) -> Refusal {
    let r = refusal(result);
    assert_eq!(r.reason, Reason::HeldByCalls, "{}", r.message);
    assert!(
        r.message.contains("held by calls in progress"),
        "{}",
        r.message
    );
    assert!(r.retry_after_seconds.is_some());
    r
}

pub const GPT5: &str = r#"
[models.gpt-5]
display_name = "GPT-5"
provider = "openai"
max_output_tokens = 128000
prices = { input = 1.25, cached_input = 0.125, output = 10.0 }
"#;

#[cfg(feature = "postgres")]
pub mod pg;

/// A fresh temp directory for one test.
pub fn tempdir(name: &str) -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ug-{name}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
