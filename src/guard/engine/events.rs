//! Events: a ticket's warnings (a soft threshold reached, a `warn` rule or a shadowed rule
//! past its budget) go to the listeners registered with `Guard::on_event`, once per window
//! per counter and threshold across every guard on the store (a store mark decides which
//! call sends it).

use super::guard::Guard;
use super::ticket::Ticket;
use crate::guard::domain::decide::RuleWarning;

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
        let now = self.shared.clock.now_ms();
        for warning in ticket.warnings() {
            let key = &warning.key;
            let window = key.id.window;
            let mark = format!(
                "ev:{}:{}:{}",
                key.render(),
                warning.threshold,
                warning.would_refuse
            );
            let keep_until = window.retain_until(key.bucket).max(now + 60_000);
            match self.shared.store.mark_once(mark, keep_until, now).await {
                Ok(true) => {
                    let listeners = self.shared.listeners.read().clone();
                    for listener in listeners {
                        listener(warning);
                    }
                }
                Ok(false) => {}
                Err(e) => log::warn!("usage_guard: an event was not sent: {e}"),
            }
        }
    }
}
