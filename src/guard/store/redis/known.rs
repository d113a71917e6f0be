//! `reserve_known` on Redis: the decision's conditions checked and the holds placed in one
//! script (`reserve_known.lua`), which answers the fresh values of every counter of the call.

use super::args::Args;
use super::checks::Checks;
use super::keys::{write_epoch_key, write_ticket_key};
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
        tag: &str,
        r: &KnownReserve,
        now: Millis,
        fence: Fence,
    ) -> (Args, Args) {
        let n = r.counters.len();
        let key_count = 2 + 2 * n + r.previous.len();
        let mut keys = Args::with_capacity(key_count, 96 * key_count);
        keys.push_with(|out| write_ticket_key(tag, &r.ticket, out));
        for key in &r.counters {
            keys.push_with(|out| self.write_redis_key(key, out));
            keys.push_with(|out| self.write_holds_key(key, out));
        }
        let arg_count = 8 + r.previous.len() + 6 * r.items.len() + 4 * r.skipped.len();
        let mut args = Args::with_capacity(arg_count, 12 * arg_count);
        args.push_num(now);
        args.push_num(r.expiry_minute);
        args.push_num(n);
        args.push_num(r.previous.len());
        for (key, counter) in &r.previous {
            keys.push_with(|out| self.write_redis_key(key, out));
            args.push_num(counter + 1);
        }
        args.push_num(r.items.len());
        let mut fenced = vec![false; n];
        for (i, item) in r.items.iter().enumerate() {
            let counter = r.item_counters[i];
            if fence.fenced.get(i).copied().unwrap_or(false) {
                fenced[counter] = true;
            }
            let (previous, assumed) = r.item_previous[i].map_or((0, 0), |(j, u)| (j + 1, u));
            args.push_num(counter + 1);
            args.push_num(item.hold);
            match item.limit {
                Some(limit) => args.push_num(limit),
                None => args.push(""),
            }
            args.push_num(item.carried);
            args.push_num(previous);
            args.push_num(assumed);
        }
        args.push_num(r.skipped.len());
        for rules in &r.skipped {
            args.push_num(rules.len());
            for (counter, amount, carried) in rules {
                args.push_num(counter + 1);
                args.push_num(*amount);
                args.push_num(*carried);
            }
        }
        // fence.lua takes these off the end: the epoch, the generation and one flag per key
        // (the record '0'; per counter its bucket '1' and its holds 'h' when a fenced item
        // is on it; previous buckets '0').
        keys.push_with(|out| write_epoch_key(tag, out));
        args.push(&fence.generation);
        args.push_with(|flags| {
            flags.push('0');
            for f in &fenced {
                flags.push_str(if *f { "1h" } else { "00" });
            }
            flags.extend(std::iter::repeat_n('0', r.previous.len()));
        });
        (keys, args)
    }

    pub(super) fn reserve_known_call(
        &self,
        reserve: KnownReserve,
        now: Millis,
        fence: Fence,
    ) -> StoreFuture<'static, KnownAnswer> {
        let (keys, args) = self.known_call(&self.inner.home, &reserve, now, fence);
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

/// The fence's answer a reserve script returned as its code (fence.lua), if it is one.
pub(super) fn fence_answer(code: i64) -> Option<FenceAnswer> {
    Some(match code {
        -2 => FenceAnswer::Untrusted,
        -3 => FenceAnswer::Stale,
        -4 => FenceAnswer::CounterLost,
        -7 => FenceAnswer::HoldingAgain,
        // A group's copy that still lasts too short after the guard extended it (groups.rs:
        // another guard's recovery moved the epoch meanwhile): read the epoch again.
        -8 => FenceAnswer::Stale,
        _ => return None,
    })
}

/// The code a reserve script answers for the fence's `answer` (`fence_answer`'s inverse).
pub(super) fn fence_code(answer: FenceAnswer) -> i64 {
    match answer {
        FenceAnswer::Untrusted => -2,
        FenceAnswer::Stale => -3,
        FenceAnswer::CounterLost => -4,
        FenceAnswer::HoldingAgain => -7,
    }
}

/// The script's answer: a code, then (unless it did not look) the values.
pub(super) fn parse(answer: &[i64], n: usize, p: usize) -> Result<KnownAnswer, String> {
    let Some(&code) = answer.first() else {
        return Err("an empty answer".into());
    };
    let outcome = match (code, fence_answer(code)) {
        (_, Some(fenced)) => KnownOutcome::Reserve(ReserveOutcome::Fenced(fenced)),
        (-1, _) => KnownOutcome::Reserve(ReserveOutcome::Reserved),
        (-5, _) => KnownOutcome::Reserve(ReserveOutcome::Settled),
        (-6, _) => KnownOutcome::Moved,
        (item, _) if item >= 0 => KnownOutcome::Reserve(ReserveOutcome::Conflict {
            item: item as usize,
        }),
        (other, _) => return Err(format!("an unknown code {other}")),
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
