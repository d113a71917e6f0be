//! `reserve_known` on Redis: the decision's conditions checked and the holds placed in one
//! script (`reserve_known.lua`), which answers the fresh values of every counter of the call.

use super::checks::Checks;
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{
    CounterRead, Fence, FenceAnswer, KnownAnswer, KnownOutcome, KnownReserve, ReserveOutcome,
    StoreFuture,
};

impl RedisStore {
    /// The keys and arguments of `reserve_known.lua` (with `fence.lua`'s at the end).
    pub(super) fn known_call(
        &self,
        r: &KnownReserve,
        now: Millis,
        fence: Fence,
    ) -> (Vec<String>, Vec<String>) {
        let n = r.counters.len();
        let mut keys = Vec::with_capacity(2 + 2 * n + r.previous.len());
        keys.push(self.ticket_key(&r.ticket));
        for key in &r.counters {
            keys.push(self.redis_key(key));
            keys.push(self.holds_key(key));
        }
        let mut args: Vec<String> = vec![
            now.to_string(),
            r.expiry_minute.to_string(),
            n.to_string(),
            r.previous.len().to_string(),
        ];
        for (key, counter) in &r.previous {
            keys.push(self.redis_key(key));
            args.push((counter + 1).to_string());
        }
        args.push(r.items.len().to_string());
        let mut fenced = vec![false; n];
        for (i, item) in r.items.iter().enumerate() {
            let counter = r.item_counters[i];
            if fence.fenced.get(i).copied().unwrap_or(false) {
                fenced[counter] = true;
            }
            let (previous, assumed) = r.item_previous[i].map_or((0, 0), |(j, u)| (j + 1, u));
            args.extend([
                (counter + 1).to_string(),
                item.hold.to_string(),
                item.limit.map(|l| l.to_string()).unwrap_or_default(),
                item.carried.to_string(),
                previous.to_string(),
                assumed.to_string(),
            ]);
        }
        args.push(r.skipped.len().to_string());
        for rules in &r.skipped {
            args.push(rules.len().to_string());
            for (counter, amount, carried) in rules {
                args.extend([
                    (counter + 1).to_string(),
                    amount.to_string(),
                    carried.to_string(),
                ]);
            }
        }
        // fence.lua takes these off the end: the epoch, the generation and one flag per key
        // (the record '0'; per counter its bucket '1' and its holds 'h' when a fenced item
        // is on it; previous buckets '0').
        keys.push(self.inner.epoch_key.clone());
        args.push(fence.generation);
        let mut flags = String::with_capacity(keys.len());
        flags.push('0');
        for f in &fenced {
            flags.push_str(if *f { "1h" } else { "00" });
        }
        flags.extend(std::iter::repeat_n('0', r.previous.len()));
        args.push(flags);
        (keys, args)
    }

    pub(super) fn reserve_known_call(
        &self,
        reserve: KnownReserve,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'static, KnownAnswer> {
        let (keys, args) = self.known_call(&reserve, now, fence);
        let (n, p) = (reserve.counters.len(), reserve.previous.len());
        self.run("reserve", move |inner, mut conn| async move {
            let script = &inner.scripts.reserve_known;
            let answer: Vec<i64> = invoke(script, &keys, &args, &mut conn).await?;
            if answer.first() == Some(&-2) {
                // Another Redis process answers: check its configuration too.
                Checks::request(&inner);
            }
            parse(&answer, n, p).map_err(|why| {
                redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "reserve", why))
            })
        })
    }
}

/// The script's answer: a code, then (unless it did not look) the values.
pub(super) fn parse(answer: &[i64], n: usize, p: usize) -> Result<KnownAnswer, String> {
    let Some(&code) = answer.first() else {
        return Err("an empty answer".into());
    };
    let outcome = match code {
        -1 => KnownOutcome::Reserve(ReserveOutcome::Reserved),
        -2 => KnownOutcome::Reserve(ReserveOutcome::Fenced(FenceAnswer::Untrusted)),
        -3 => KnownOutcome::Reserve(ReserveOutcome::Fenced(FenceAnswer::Stale)),
        -4 => KnownOutcome::Reserve(ReserveOutcome::Fenced(FenceAnswer::CounterLost)),
        -5 => KnownOutcome::Reserve(ReserveOutcome::Settled),
        -6 => KnownOutcome::Moved,
        item if item >= 0 => KnownOutcome::Reserve(ReserveOutcome::Conflict {
            item: item as usize,
        }),
        other => return Err(format!("an unknown code {other}")),
    };
    let values = &answer[1..];
    if values.is_empty() {
        return Ok(KnownAnswer {
            outcome,
            counters: Vec::new(),
            previous: Vec::new(),
        });
    }
    if values.len() != 2 * n + p {
        return Err(format!(
            "{} values for {n} counters and {p} previous",
            values.len()
        ));
    }
    let value = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(KnownAnswer {
        outcome,
        counters: values[..2 * n]
            .chunks_exact(2)
            .map(|pair| CounterRead {
                used: value(pair[0]),
                held: value(pair[1]),
            })
            .collect(),
        previous: values[2 * n..].iter().map(|&v| value(v)).collect(),
    })
}
