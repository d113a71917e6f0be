//! `settle_parts` on Redis: the parts of one batch in one script (`settle_parts.lua`).

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
            return Box::pin(std::future::ready(Ok(Vec::new())));
        }
        let mut keys: Vec<String> = vec![self.ticket_key(&settle.ticket)];
        let mut args: Vec<String> = vec![
            now.to_string(),
            settle.expiry_minute.to_string(),
            settle.settled_until.to_string(),
            settle.parts.len().to_string(),
        ];
        for part in &settle.parts {
            let holds: Vec<_> = part.holds.iter().filter(|h| h.amount > 0).collect();
            let adds: Vec<_> = part.adds.iter().filter(|a| a.amount > 0).collect();
            keys.push(self.ticket_key(&part.id));
            args.push(if part.bill { "1" } else { "0" }.to_string());
            args.push(holds.len().to_string());
            args.push(adds.len().to_string());
            for hold in holds {
                keys.push(self.holds_key(&hold.key));
                args.push(hold.amount.to_string());
            }
            for add in adds {
                keys.push(self.redis_key(&add.key));
                args.push(add.amount.to_string());
                args.push(add.retain_until.to_string());
            }
        }
        // fence.lua takes these off the end: the parts' adds are listed under the store's
        // generation, as a settle's (keys.rs, settle_call).
        keys.push(self.inner.epoch_key.clone());
        args.extend([String::new(), String::new()]);
        let expected = settle.parts.len();
        self.run("settle_parts", move |inner, mut conn| async move {
            let mut call = inner.scripts.settle_parts.prepare_invoke();
            call.key(keys).arg(args);
            let answer: Vec<i64> = call.invoke_async(&mut conn).await?;
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
