//! `read` and `settle` on Redis (one script each), and `settle_many`: many settles in one
//! pipeline (one round trip), each its own `settle.lua` call, so each stays atomic and
//! idempotent by id on its own.

use redis::RedisResult;

use super::args::Args;
use super::scripts::{eval_cmd, invoke};
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{
    CounterKey, CounterRead, Settle, SettleOutcome, StoreError, StoreFuture,
};

type Answers = Vec<Result<SettleOutcome, StoreError>>;

impl RedisStore {
    pub(super) fn read_call(
        &self,
        keys: Vec<CounterKey>,
        now: Millis,
    ) -> StoreFuture<'static, Vec<CounterRead>> {
        if keys.is_empty() {
            return StoreFuture::ready(Ok(Vec::new()));
        }
        let mut redis_keys = Args::with_capacity(2 * keys.len(), 96 * 2 * keys.len());
        for key in &keys {
            redis_keys.push_with(|out| self.write_redis_key(key, out));
            redis_keys.push_with(|out| self.write_holds_key(key, out));
        }
        let mut args = Args::default();
        args.push_num(now);
        self.run("read", move |inner, mut conn| async move {
            let flat: Vec<u64> = invoke(&inner.scripts.read, &redis_keys, &args, &mut conn).await?;
            Ok(flat
                .chunks_exact(2)
                .map(|pair| CounterRead {
                    used: pair[0],
                    held: pair[1],
                })
                .collect())
        })
    }

    pub(super) fn settle_one_call(
        &self,
        settle: &Settle,
        now: Millis,
    ) -> StoreFuture<'static, SettleOutcome> {
        let Some((redis_keys, args)) = self.settle_call(&self.inner.home, settle, now) else {
            return StoreFuture::ready(Ok(SettleOutcome::Settled));
        };
        self.run("settle", move |inner, mut conn| async move {
            let answer: i64 = invoke(&inner.scripts.settle, &redis_keys, &args, &mut conn).await?;
            Ok(if answer == 0 {
                SettleOutcome::Settled
            } else {
                SettleOutcome::AlreadySettled
            })
        })
    }

    /// Sends every settle of `settles` that has something to do in one pipeline. A server
    /// that lost its scripts (`NOSCRIPT` or a function not found: restarted, failed over,
    /// `SCRIPT FLUSH`, `FUNCTION FLUSH`) is sent them and then the whole pipeline again:
    /// every settle is idempotent by id, so those that ran the first time do nothing the
    /// second.
    pub(super) fn settle_many_call(
        &self,
        settles: &[Settle],
        now: Millis,
    ) -> StoreFuture<'static, Answers> {
        let calls: Vec<Option<(Args, Args)>> = settles
            .iter()
            .map(|s| self.settle_call(&self.inner.home, s, now))
            .collect();
        if calls.iter().all(Option::is_none) {
            let done = settles.iter().map(|_| Ok(SettleOutcome::Settled)).collect();
            return StoreFuture::ready(Ok(done));
        }
        self.run("settle", move |inner, mut conn| async move {
            let script = &inner.scripts.settle;
            let mut send = 0;
            loop {
                send += 1;
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                for (keys, args) in calls.iter().flatten() {
                    pipe.add_command(eval_cmd(script, keys, args));
                }
                let answers: Vec<RedisResult<i64>> = pipe.query_async(&mut conn).await?;
                // A server that cannot run the script yet (`Lua::recover`) is made able to,
                // and sent the whole pipeline again (whichever settle's answer says so).
                let mut again = false;
                for e in answers.iter().filter_map(|a| a.as_ref().err()) {
                    if script.recover(e, &mut conn, send).await? {
                        again = true;
                        break;
                    }
                }
                if again {
                    continue;
                }
                let mut answers = answers.into_iter();
                return Ok(calls
                    .iter()
                    .map(|call| match call {
                        None => Ok(SettleOutcome::Settled),
                        Some(_) => match answers.next() {
                            Some(Ok(0)) => Ok(SettleOutcome::Settled),
                            Some(Ok(_)) => Ok(SettleOutcome::AlreadySettled),
                            Some(Err(e)) => Err(StoreError(format!("redis settle: {e}"))),
                            None => Err(StoreError("redis settle: no answer".into())),
                        },
                    })
                    .collect());
            }
        })
    }
}
