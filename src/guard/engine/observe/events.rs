//! Events: a ticket's warnings (a soft threshold reached, a `warn` rule or a shadowed rule
//! past its budget) and the actions taken (degrade, throttle, halt) go out once per window
//! per counter and threshold across every guard on the store (a store mark decides which
//! call sends it), to three places: the listeners of `Guard::on_event`, the streams of
//! `Guard::events`, and, with a ledger, its audit log. Any producer that calls
//! [`Guard::publish`] (or [`Guard::emit_once`] with a warning) reaches all three.

use std::sync::Arc;

use crate::guard::domain::clock::Millis;
use crate::guard::domain::counter::CounterKey;
use crate::guard::domain::decide::RuleWarning;
use crate::guard::domain::event::{Event, EventKind};
use crate::guard::domain::generic::GenericRule;
use crate::guard::engine::handle::Guard;
use crate::guard::engine::observe::event_stream::EventStream;
use crate::guard::engine::shared::Listener;
use crate::guard::ledger::AuditRow;

/// Whose call an event is about.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caller {
    pub(crate) principal: Option<Arc<str>>,
    pub(crate) model: Option<Arc<str>>,
}

impl Caller {
    /// The call of `user` on `model`.
    pub(crate) fn of(user: Option<&str>, model: &str) -> Caller {
        Caller {
            principal: user.map(Arc::from),
            model: Some(Arc::from(model)),
        }
    }
}

impl Guard {
    /// The work of [`Guard::on_event`].
    pub(crate) fn add_listener(&self, listener: impl Fn(&Event) + Send + Sync + 'static) {
        let listener: Listener = Arc::new(listener);
        self.shared.listeners.rcu(|all| {
            let mut all = Vec::clone(all);
            all.push(listener.clone());
            all
        });
    }

    /// The work of [`Guard::events`].
    pub(crate) fn subscribe(&self, buffer: usize) -> EventStream {
        self.shared.events.subscribe(buffer)
    }

    /// Whether an event would go anywhere (else no store mark is spent on it).
    pub(crate) fn has_event_sinks(&self) -> bool {
        !self.shared.listeners.load().is_empty()
            || self.shared.ledger.get().is_some()
            || self.shared.events.has_streams()
    }

    /// Sends an admitted call's warnings that are new events.
    pub(crate) async fn emit(&self, warnings: &[RuleWarning], caller: impl FnOnce() -> Caller) {
        if warnings.is_empty() || !self.has_event_sinks() {
            return;
        }
        let caller = caller();
        for warning in warnings {
            let key = &warning.key;
            let (threshold, refused) = (warning.threshold, warning.would_refuse);
            let mark = format!("ev:{}:{threshold}:{refused}", key.render());
            let keep_until = key.id.window.retain_until(key.bucket);
            let kind = EventKind::of_warning(warning);
            self.publish(kind, warning.clone(), &caller, mark, keep_until)
                .await;
        }
    }

    /// The event of a rule's action taken (degrade, throttle, halt) on its counter `key`,
    /// once per `mark` (the counter's window, or the halt), kept until `keep_until`.
    pub(crate) async fn emit_action(
        &self,
        rule: &GenericRule,
        key: CounterKey,
        (mark, keep_until): (String, Millis),
        caller: &Caller,
    ) {
        let Some(kind) = EventKind::of_action(rule.action) else {
            return;
        };
        let event = RuleWarning {
            rule: rule.name.clone(),
            metric: rule.spec.metric,
            used: rule.spec.amount,
            budget: rule.spec.amount,
            threshold: 1.0,
            action: rule.action,
            would_refuse: false,
            key,
        };
        self.publish(kind, event, caller, mark, keep_until).await;
    }

    /// Sends `warning` as an event of its kind (`EventKind::of_warning`) for no particular
    /// call, if this call sets `mark` (kept until `keep_until`, at least a minute): the hook
    /// of producers outside admission (the quota service's soft thresholds).
    #[allow(dead_code)]
    pub(crate) async fn emit_once(&self, warning: &RuleWarning, mark: String, keep_until: Millis) {
        let kind = EventKind::of_warning(warning);
        let caller = Caller::default();
        self.publish(kind, warning.clone(), &caller, mark, keep_until)
            .await;
    }

    /// Sends an event if this call sets the store mark `mark` (kept until `keep_until`, at
    /// least a minute): to the ledger's audit log, the event streams and the listeners.
    /// The mark is the event's id.
    pub(crate) async fn publish(
        &self,
        kind: EventKind,
        warning: RuleWarning,
        caller: &Caller,
        mark: String,
        keep_until: Millis,
    ) {
        if !self.has_event_sinks() {
            return;
        }
        let now = self.shared.clock.now_ms();
        let keep_until = keep_until.max(now + 60_000);
        match self
            .shared
            .store
            .mark_once(mark.clone(), keep_until, now)
            .await
        {
            Ok(true) => self.deliver(&Event {
                id: mark,
                at_ms: now,
                kind,
                warning,
                principal: caller.principal.clone(),
                model: caller.model.clone(),
            }),
            Ok(false) => {}
            Err(e) => log::warn!("usage_guard: an event was not sent: {e}"),
        }
    }

    fn deliver(&self, event: &Event) {
        if let Some(ledger) = self.shared.ledger.get() {
            ledger.record_event(AuditRow::of(event));
        }
        self.shared.events.send(event);
        let listeners = self.shared.listeners.load_full();
        for listener in listeners.iter() {
            listener(event);
        }
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use std::sync::{Arc, Mutex};

    use crate::guard::domain::clock::ManualClock;
    use crate::guard::domain::counter::CounterKey;
    use crate::guard::domain::decide::RuleWarning;
    use crate::guard::domain::event::EventKind;
    use crate::guard::domain::generic::Action;
    use crate::guard::domain::policy::Policy;
    use crate::guard::domain::rule::{CounterId, Metric};
    use crate::guard::domain::window::Window;
    use crate::guard::engine::handle::Guard;
    use crate::guard::ledger::{AuditQuery, Ledger, SqliteLedger};
    use crate::guard::store::MemoryStore;

    /// A producer outside admission (the quota service's soft thresholds) calls
    /// `emit_once` with a warning: listeners, streams and the audit log get it, once.
    #[test]
    fn another_producer_reaches_listeners_streams_and_the_audit_log() {
        let policy = Policy::from_toml("[models.m]\nprovider = \"openai\"\n").unwrap();
        let clock = Arc::new(ManualClock::new(1_764_000_000_000));
        let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(":memory:").unwrap());
        let guard =
            Guard::new(policy, Arc::new(MemoryStore::new()), clock).with_ledger(ledger.clone());
        let heard = Arc::new(Mutex::new(Vec::new()));
        let sink = heard.clone();
        guard.on_event(move |e| sink.lock().unwrap().push(e.kind));
        let stream = guard.events(10);
        let id = CounterId::rule(
            Arc::from("quota:team:x"),
            Metric::Cost,
            Window::Sliding { seconds: 60 },
        );
        let warning = RuleWarning {
            rule: Arc::from("team x monthly"),
            metric: Metric::Cost,
            used: 8_000_000,
            budget: 10_000_000,
            threshold: 0.8,
            action: Action::Warn,
            would_refuse: false,
            key: CounterKey {
                id: Arc::new(id),
                bucket: 0,
            },
        };
        for _ in 0..2 {
            let sent = guard.emit_once(&warning, "ev:quota:x:0.8".into(), 0);
            futures::executor::block_on(sent);
        }
        assert_eq!(*heard.lock().unwrap(), vec![EventKind::SoftThreshold]);
        let streamed = stream.try_next().unwrap();
        assert_eq!(
            (streamed.id.as_str(), stream.try_next()),
            ("ev:quota:x:0.8", None)
        );
        let rows = ledger.audit(&AuditQuery::default()).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].rule.as_str(), rows[0].kind.as_str()),
            ("team x monthly", "soft_threshold")
        );
        assert_eq!(rows[0].detail["used"], serde_json::json!(8_000_000));
        assert_eq!(rows[0].detail["unit"], serde_json::json!("micro_usd"));
    }
}
