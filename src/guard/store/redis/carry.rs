//! `reserve_known_carrying` on Redis: the queued settles and the next reservation in one
//! script (`carry.lua`): settles first, each as `settle.lua` does it, then `reserve_known.lua`.

use super::checks::Checks;
use super::known::parse;
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{
    Fence, KnownAnswer, KnownReserve, Settle, SettleOutcome, StoreError, StoreFuture,
};

/// The reservation's answer and one result per settle.
type Carried = (KnownAnswer, Vec<Result<SettleOutcome, StoreError>>);

impl RedisStore {
    /// The keys and arguments of `carry.lua`: its head (the number of settles, the
    /// reservation's key and argument counts, each settle's), the reservation's keys and
    /// arguments, each settle's, then `fence.lua`'s (the epoch; the generation and the flags,
    /// '0' for every settle key: the fence checks the reservation's keys only). Settles with
    /// nothing to do are left out (`sent` says which were sent).
    fn carry_args(
        &self,
        reserve: &KnownReserve,
        settles: &[Settle],
        now: Millis,
        fence: Fence,
    ) -> (Vec<String>, Vec<String>, Vec<bool>) {
        let calls: Vec<_> = settles.iter().map(|s| self.settle_call(s, now)).collect();
        let sent: Vec<bool> = calls.iter().map(Option::is_some).collect();
        let (mut keys, mut reserve_args) = self.known_call(reserve, now, fence);
        let epoch = keys.pop().expect("known_call ends with the epoch key");
        let mut flags = reserve_args.pop().expect("known_call ends with the flags");
        let generation = reserve_args.pop().expect("then the generation");
        let calls: Vec<_> = calls.into_iter().flatten().collect();
        let mut args = vec![
            calls.len().to_string(),
            keys.len().to_string(),
            reserve_args.len().to_string(),
        ];
        // settle_call ends with fence.lua's: the epoch key, then two empty arguments.
        for (settle_keys, settle_args) in &calls {
            args.push((settle_keys.len() - 1).to_string());
            args.push((settle_args.len() - 2).to_string());
        }
        args.append(&mut reserve_args);
        for (mut settle_keys, mut settle_args) in calls {
            settle_keys.pop();
            settle_args.truncate(settle_args.len() - 2);
            flags.extend(std::iter::repeat_n('0', settle_keys.len()));
            keys.append(&mut settle_keys);
            args.append(&mut settle_args);
        }
        keys.push(epoch);
        args.push(generation);
        args.push(flags);
        (keys, args, sent)
    }

    pub(super) fn carry_call(
        &self,
        reserve: KnownReserve,
        settles: &[Settle],
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'static, Carried> {
        let (keys, args, sent) = self.carry_args(&reserve, settles, now, fence);
        let (n, p) = (reserve.counters.len(), reserve.previous.len());
        let s = sent.iter().filter(|&&sent| sent).count();
        self.run("reserve", move |inner, mut conn| async move {
            let answer: Vec<i64> = invoke(&inner.scripts.carry, &keys, &args, &mut conn).await?;
            let bad = |why: String| {
                redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "reserve", why))
            };
            if answer.len() <= s {
                return Err(bad(format!("{} values for {s} settles", answer.len())));
            }
            if answer[s] == -2 {
                // Another Redis process answers: check its configuration too.
                Checks::request(&inner);
            }
            let reserved = parse(&answer[s..], n, p).map_err(bad)?;
            let mut outcomes = answer[..s].iter();
            let settled = sent
                .iter()
                .map(|&sent| match sent.then(|| outcomes.next()) {
                    None => Ok(SettleOutcome::Settled),
                    Some(Some(0)) => Ok(SettleOutcome::Settled),
                    Some(Some(_)) => Ok(SettleOutcome::AlreadySettled),
                    Some(None) => Err(StoreError("redis settle: no answer".into())),
                })
                .collect();
            Ok((reserved, settled))
        })
    }
}
