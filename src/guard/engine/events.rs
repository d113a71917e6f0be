//! Events: a ticket's warnings (a soft threshold reached, a `warn` rule or a shadowed rule
//! past its budget) go to the listeners registered with `Guard::on_event`, once per window
//! per counter and threshold across every guard on the store (a store mark decides which
//! call sends it); so do the actions taken (degrade, throttle, halt), once per window.

use super::guard::Guard;
use super::ticket::Ticket;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::counter::CounterKey;
use crate::guard::domain::decide::RuleWarning;
use crate::guard::domain::generic::GenericRule;

impl Guard {
    /// Calls `listener` with each event: a warning of an admitted call that no call before
    /// it sent for the same counter, window and threshold (on any guard of the store).
    /// Listeners run on the admitting thread, after the reservation.
    pub fn on_event(&self, listener: impl Fn(&RuleWarning) + Send + Sync + 'static) {
        self.shared
            .listeners
            .write()
            .push(std::sync::Arc::new(listener));
    }

    /// Sends the ticket's warnings that are new events to the listeners.
    pub(crate) async fn emit(&self, ticket: &Ticket) {
        if ticket.warnings().is_empty() || self.shared.listeners.read().is_empty() {
            return;
        }
        for warning in ticket.warnings() {
            let key = &warning.key;
            let (threshold, refused) = (warning.threshold, warning.would_refuse);
            let mark = format!("ev:{}:{threshold}:{refused}", key.render());
            let keep_until = key.id.window.retain_until(key.bucket);
            self.emit_once(warning, mark, keep_until).await;
        }
    }

    /// The event of a rule's action taken (degrade, throttle, halt) on its counter `key`,
    /// once per `mark` (the counter's window, or the halt), kept until `keep_until`.
    pub(crate) async fn emit_action(
        &self,
        rule: &GenericRule,
        key: CounterKey,
        mark: String,
        keep_until: Millis,
    ) {
        if self.shared.listeners.read().is_empty() {
            return;
        }
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
        self.emit_once(&event, mark, keep_until).await;
    }

    /// Sends `event` to the listeners if this call sets `mark` (kept until `keep_until`, at
    /// least a minute).
    async fn emit_once(&self, event: &RuleWarning, mark: String, keep_until: Millis) {
        let now = self.shared.clock.now_ms();
        let keep_until = keep_until.max(now + 60_000);
        match self.shared.store.mark_once(mark, keep_until, now).await {
            Ok(true) => {
                let listeners = self.shared.listeners.read().clone();
                for listener in listeners {
                    listener(event);
                }
            }
            Ok(false) => {}
            Err(e) => log::warn!("usage_guard: an event was not sent: {e}"),
        }
    }
}
