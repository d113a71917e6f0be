//! `settle_parts` on Redis: the parts of one batch in one script (`settle_parts.lua`), or one
//! per slot group.

use futures::future::join_all;

use super::args::Args;
use super::keys::{write_epoch_key, write_ticket_key};
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{PartsSettle, SettleOutcome, StoreFuture};

impl RedisStore {
    /// `settle_parts`: one `settle_parts.lua` call; with slot groups one per group the parts
    /// touch, each with every part (each group keeps its own record of each part), and a part
    /// is settled when any group settled it now.
    pub(super) fn settle_parts_call(
        &self,
        settle: &PartsSettle,
        now: Millis,
    ) -> StoreFuture<'_, Vec<SettleOutcome>> {
        if settle.parts.is_empty() {
            return StoreFuture::ready(Ok(Vec::new()));
        }
        let calls: Vec<(Args, Args)> = match self.grouped() {
            true => self.parts_groups(settle),
            false => vec![(self.inner.home.clone(), settle.clone())],
        }
        .iter()
        .map(|(tag, sub)| self.parts_call(tag, sub, now))
        .collect();
        let expected = settle.parts.len();
        self.run("settle_parts", move |inner, conn| async move {
            let script = &inner.scripts.settle_parts;
            let sent = calls.iter().map(|(keys, args)| {
                let mut conn = conn.clone();
                async move { invoke::<Vec<i64>, _>(script, keys, args, &mut conn).await }
            });
            let mut settled = vec![false; expected];
            for answer in join_all(sent).await {
                let answer = answer?;
                if answer.len() != expected {
                    let why = format!("{} answers for {expected} parts", answer.len());
                    return Err(redis::RedisError::from((
                        redis::ErrorKind::UnexpectedReturnType,
                        "settle_parts",
                        why,
                    )));
                }
                for (done, a) in settled.iter_mut().zip(answer) {
                    *done |= a == 0;
                }
            }
            Ok(settled
                .into_iter()
                .map(|done| match done {
                    true => SettleOutcome::Settled,
                    false => SettleOutcome::AlreadySettled,
                })
                .collect())
        })
    }

    /// The keys and arguments of `settle_parts.lua` for `settle` under `tag`.
    fn parts_call(&self, tag: &str, settle: &PartsSettle, now: Millis) -> (Args, Args) {
        let mut keys = Args::default();
        keys.push_with(|out| write_ticket_key(tag, &settle.ticket, out));
        let mut args = Args::default();
        args.push_num(now);
        args.push_num(settle.expiry_minute);
        args.push_num(settle.settled_until);
        args.push_num(settle.parts.len());
        for part in &settle.parts {
            let holds = part.holds.iter().filter(|h| h.amount > 0);
            let adds = part.adds.iter().filter(|a| a.amount > 0);
            keys.push_with(|out| write_ticket_key(tag, &part.id, out));
            args.push(if part.bill { "1" } else { "0" });
            args.push_num(holds.clone().count());
            args.push_num(adds.clone().count());
            for hold in holds {
                keys.push_with(|out| self.write_holds_key(&hold.key, out));
                args.push_num(hold.amount);
            }
            self.push_adds(adds, &mut keys, &mut args);
        }
        // fence.lua takes these off the end: the parts' adds are listed under the group's
        // generation, as a settle's (keys.rs, settle_call).
        keys.push_with(|out| write_epoch_key(tag, out));
        args.push("");
        args.push("");
        (keys, args)
    }
}
