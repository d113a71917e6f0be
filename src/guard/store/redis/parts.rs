//! `settle_parts` on Redis: the parts of one batch in one script (`settle_parts.lua`).

use super::args::Args;
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{PartsSettle, SettleOutcome, StoreFuture};

impl RedisStore {
    /// The keys and arguments of `settle_parts.lua` for `settle`, then one script call.
    pub(super) fn settle_parts_call(
        &self,
        settle: &PartsSettle,
        now: Millis,
    ) -> StoreFuture<'_, Vec<SettleOutcome>> {
        if settle.parts.is_empty() {
            return StoreFuture::ready(Ok(Vec::new()));
        }
        let mut keys = Args::default();
        keys.push_with(|out| self.write_ticket_key(&settle.ticket, out));
        let mut args = Args::default();
        args.push_num(now);
        args.push_num(settle.expiry_minute);
        args.push_num(settle.settled_until);
        args.push_num(settle.parts.len());
        for part in &settle.parts {
            let holds = part.holds.iter().filter(|h| h.amount > 0);
            let adds = part.adds.iter().filter(|a| a.amount > 0);
            keys.push_with(|out| self.write_ticket_key(&part.id, out));
            args.push(if part.bill { "1" } else { "0" });
            args.push_num(holds.clone().count());
            args.push_num(adds.clone().count());
            for hold in holds {
                keys.push_with(|out| self.write_holds_key(&hold.key, out));
                args.push_num(hold.amount);
            }
            self.push_adds(adds, &mut keys, &mut args);
        }
        // fence.lua takes these off the end: the parts' adds are listed under the store's
        // generation, as a settle's (keys.rs, settle_call).
        keys.push(&self.inner.epoch_key);
        args.push("");
        args.push("");
        let expected = settle.parts.len();
        self.run("settle_parts", move |inner, mut conn| async move {
            let answer: Vec<i64> =
                invoke(&inner.scripts.settle_parts, &keys, &args, &mut conn).await?;
            if answer.len() != expected {
                let why = format!("{} answers for {expected} parts", answer.len());
                return Err(redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "settle_parts",
                    why,
                )));
            }
            Ok(answer
                .into_iter()
                .map(|a| {
                    if a == 0 {
                        SettleOutcome::Settled
                    } else {
                        SettleOutcome::AlreadySettled
                    }
                })
                .collect())
        })
    }
}
