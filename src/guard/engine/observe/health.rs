//! A guard's provider health: its book (breakers, cooldowns) on the guard's clock, shared
//! with every guard on the same store. An opened breaker and a started cooldown are written
//! as store notes (`raise_until`) that last as long as they do; before answering whether a
//! provider may take a call, a guard reads the notes it has not read for `REFRESH_MS`, and
//! adopts what another guard opened or cooled. The gateway and the Python wrappers ask the
//! same guard, so they share one book.

use std::collections::HashMap;
use std::sync::Arc;

use crate::lock::Mutex;

use crate::fork::ForkLocal;
use crate::guard::domain::clock::{Clock, Millis};
use crate::guard::domain::health::{
    HealthBook, HealthSettings, HealthSnapshot, Outcome, Recorded, Transition, Unavailable,
    UnavailableReason,
};
use crate::guard::store::CounterStore;

/// How long a guard trusts what it read of the shared notes (a breaker opened elsewhere is
/// seen within this, plus one store round trip).
pub(crate) const REFRESH_MS: i64 = 500;

/// The store note of a provider's open breaker.
fn breaker_note(provider: &str) -> String {
    format!("health:breaker:{provider}")
}

/// The store note of a credential's cooldown.
fn cooldown_note(provider: &str, credential: &str) -> String {
    format!("health:cool:{}:{provider}:{credential}", provider.len())
}

/// One guard's provider health.
pub struct ProviderHealth {
    /// This process's book (a forked child copies the parent's when no parent thread held
    /// it at the fork; else it starts afresh and adopts what the store's notes say).
    book: ForkLocal<Mutex<HealthBook>>,
    /// When each (provider, credential) last read the shared notes (per process).
    refreshed: ForkLocal<Mutex<HashMap<(String, String), Millis>>>,
    store: Arc<dyn CounterStore>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ProviderHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderHealth").finish_non_exhaustive()
    }
}

impl ProviderHealth {
    /// Health on `store` (shared notes) and `clock`, with the default thresholds.
    pub(crate) fn new(store: Arc<dyn CounterStore>, clock: Arc<dyn Clock>) -> Self {
        ProviderHealth {
            book: ForkLocal::empty(),
            refreshed: ForkLocal::empty(),
            store,
            clock,
        }
    }

    fn book(&self) -> &Mutex<HealthBook> {
        self.book.get_with(|parent| {
            let copied = parent.and_then(|p| p.try_lock().map(|b| b.clone()));
            Mutex::new(copied.unwrap_or_else(|| HealthBook::new(HealthSettings::default())))
        })
    }

    /// Reads the shared notes of `provider` and `credential` unless read in the last
    /// `REFRESH_MS`, and adopts an open breaker or a cooldown found there. A store that does
    /// not answer leaves this guard with what it knows itself.
    async fn refresh(&self, provider: &str, credential: &str, now: Millis) {
        {
            let mut refreshed = self.refreshed.get().lock();
            let key = (provider.to_string(), credential.to_string());
            if let Some(at) = refreshed.get(&key) {
                if now >= *at && now - *at < REFRESH_MS {
                    return;
                }
            }
            if refreshed.len() > 10_000 {
                refreshed.clear();
            }
            refreshed.insert(key, now);
        }
        let keys = vec![breaker_note(provider), cooldown_note(provider, credential)];
        let notes = match self.store.read_until(keys, now).await {
            Ok(n) => n,
            Err(e) => {
                log::debug!("provider health: the shared notes could not be read: {e}");
                return;
            }
        };
        let mut book = self.book().lock();
        if let Some(Some((until, _))) = notes.first() {
            if book.adopt_open(provider, *until, now) {
                log::info!(
                    "provider health: the {provider} breaker was opened by another guard \
                     (until {})",
                    crate::guard::domain::clock::iso8601(*until)
                );
            }
        }
        if let Some(Some((until, note))) = notes.get(1) {
            let reason = note.parse().unwrap_or(UnavailableReason::RateLimited);
            book.adopt_cooldown(provider, credential, *until, reason, now);
        }
    }

    /// Whether a call through `credential` of `provider` may go now (without taking a
    /// half-open probe): the fallback ladder derives its candidates with this.
    pub async fn available(&self, provider: &str, credential: &str) -> Result<(), Unavailable> {
        let now = self.clock.now_ms();
        self.refresh(provider, credential, now).await;
        self.book().lock().available(provider, credential, now)
    }

    /// Lets a call through `credential` of `provider` go now (taking a half-open probe), or
    /// says why not.
    pub async fn take(&self, provider: &str, credential: &str) -> Result<(), Unavailable> {
        let now = self.clock.now_ms();
        self.refresh(provider, credential, now).await;
        self.book().lock().take(provider, credential, now)
    }

    /// Records the outcome of `caller`'s call through `credential` of `provider`
    /// (`caller`: a gateway key's label or a user; `headers`: the answer's, for a cooldown's
    /// timing), logs what it changed and shares it through the store.
    pub async fn record(
        &self,
        provider: &str,
        credential: &str,
        caller: &str,
        outcome: Outcome,
        headers: &[(String, String)],
    ) -> Recorded {
        let now = self.clock.now_ms();
        let recorded = self
            .book()
            .lock()
            .record(provider, credential, caller, outcome, headers, now);
        match recorded.transition {
            Transition::Opened(until) => {
                log::warn!(
                    "provider health: the {provider} breaker opened for {} ms (retryable \
                     failures of more than one caller); calls go to fallbacks until it \
                     half-opens",
                    until - now
                );
                self.share(breaker_note(provider), until, "open", now).await;
            }
            Transition::Closed => {
                log::info!("provider health: the {provider} breaker closed (probes succeeded)")
            }
            Transition::None => {}
        }
        if let Some(c) = recorded.cooldown {
            let clamp = if c.timing.clamped() {
                format!(", clamped to {} ms", c.timing.wait_ms)
            } else {
                String::new()
            };
            log::warn!(
                "provider health: credential {credential:?} of {provider} cools down for {} ms \
                 ({}): the provider asked for {} ms ({}){clamp}",
                c.until - now,
                c.reason.as_str(),
                c.timing.asked_ms,
                c.timing.source.as_str(),
            );
            let note = cooldown_note(provider, credential);
            self.share(note, c.until, c.reason.as_str(), now).await;
        }
        recorded
    }

    async fn share(&self, key: String, until: Millis, note: &str, now: Millis) {
        let shared = self
            .store
            .raise_until(key, until, note.to_string(), now)
            .await;
        if let Err(e) = shared {
            log::warn!("provider health: could not share a health change through the store: {e}");
        }
    }

    /// Every provider's breaker and the cooling credentials this guard knows, now.
    pub fn snapshot(&self) -> HealthSnapshot {
        self.book().lock().snapshot(self.clock.now_ms())
    }
}
