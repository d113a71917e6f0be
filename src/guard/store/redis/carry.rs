//! `reserve_known_carrying` on Redis: the queued settles and the next reservation in one
//! script (`carry.lua`): settles first, each as `settle.lua` does it, then `reserve_known.lua`.

use super::args::Args;
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
    ) -> (Args, Args, Vec<bool>) {
        let calls: Vec<_> = settles
            .iter()
            .map(|s| self.settle_call(&self.inner.home, s, now))
            .collect();
        let sent: Vec<bool> = calls.iter().map(Option::is_some).collect();
        let known = self.known_call(&self.inner.home, reserve, now, fence);
        let calls: Vec<_> = calls.into_iter().flatten().collect();
        let (keys, args) = carry_of(known, &calls);
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

/// The keys and arguments of `carry.lua` from a `reserve_known.lua` call (`known`, built for
/// the tag whose keys it reads) and the `settle.lua` calls it carries (each ending with
/// fence.lua's epoch key and two empty arguments, taken off here: see `carry_args`).
pub(super) fn carry_of(known: (Args, Args), calls: &[(Args, Args)]) -> (Args, Args) {
    let (reserve_keys, mut reserve_args) = known;
    let flags = reserve_args.pop().expect("known_call ends with the flags");
    let generation = reserve_args.pop().expect("then the generation");
    let settle_keys: usize = calls.iter().map(|(k, _)| k.len() - 1).sum();
    let settle_args: usize = calls.iter().map(|(_, a)| a.len() - 2).sum();
    let mut keys = Args::with_capacity(reserve_keys.len() + settle_keys, 96 * 64);
    keys.extend_from(&reserve_keys, reserve_keys.len() - 1);
    let mut args = Args::with_capacity(5 + 2 * calls.len() + settle_args, 16 * 160);
    args.push_num(calls.len());
    args.push_num(reserve_keys.len() - 1);
    args.push_num(reserve_args.len());
    for (settle_keys, settle_args) in calls {
        args.push_num(settle_keys.len() - 1);
        args.push_num(settle_args.len() - 2);
    }
    args.extend_from(&reserve_args, reserve_args.len());
    for (settle_keys, settle_args) in calls {
        keys.extend_from(settle_keys, settle_keys.len() - 1);
        args.extend_from(settle_args, settle_args.len() - 2);
    }
    keys.push(reserve_keys.get(reserve_keys.len() - 1));
    args.push(&generation);
    args.push_with(|out| {
        out.push_str(&flags);
        out.extend(std::iter::repeat_n('0', settle_keys));
    });
    (keys, args)
}
