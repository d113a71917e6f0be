//! A refusal by a `halt_session` rule places the session's halt in the store before it is
//! returned, so every guard on the store refuses that session until the halt ends.

use crate::error::Error;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::counter::ReserveItem;
use crate::guard::domain::decide::halt_to_place;
use crate::guard::domain::path::Path;
use crate::guard::domain::refusal::Refusal;
use crate::guard::engine::handle::Guard;
use crate::guard::engine::observe::events::Caller;

impl Guard {
    /// The error for `refusal` of a call on `path`, after placing the halt it calls for (a
    /// store that does not answer leaves the session unhalted: the refusal stands anyway).
    pub(crate) async fn refused(&self, path: &Path, refusal: Refusal, now: Millis) -> Error {
        if let Some((ticket, item, minute)) = halt_to_place(path, &refusal, now) {
            let placed = self
                .shared
                .store
                .reserve(ticket.clone(), vec![item.clone()], minute, now)
                .await;
            match placed {
                Ok(_) => self.halted(path, &ticket, item).await,
                Err(e) => log::warn!("usage_guard: a session halt was not placed: {e}"),
            }
        }
        self.refuse(refusal)
    }

    /// The event of the halt placed under `ticket` (one per halt, whichever guard placed
    /// it).
    async fn halted(&self, path: &Path, ticket: &str, item: ReserveItem) {
        let Some(halt) = path
            .halts
            .iter()
            .find(|h| path.counters[h.slot] == item.key.id)
        else {
            return;
        };
        let caller = Caller {
            principal: path.user.clone(),
            model: Some(path.model.clone()),
        };
        let mark = (format!("ev:{ticket}"), item.retain_until);
        self.emit_action(&halt.rule, item.key, mark, &caller).await;
    }
}
