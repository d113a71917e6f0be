//! The Redis store's wait queues (`lua/wait_queues.lua`): per queue two sorted sets under the mark
//! head, `queue:<name>` (order) and `queue-alive:<name>` (liveness), and one ticket sequence,
//! `queue-seq`; every step is one script call.

use super::args::Args;
use super::scripts::invoke;
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::store::{QueueJoin, QueueSpot, StoreFuture, WaitQueues};

impl RedisStore {
    /// The script's keys: the sequence, then each queue's order and liveness.
    fn queue_keys<'a>(&self, names: impl Iterator<Item = &'a str>) -> Vec<String> {
        let mut keys = vec![self.mark_key("queue-seq")];
        for name in names {
            keys.push(self.mark_key(&format!("queue:{name}")));
            keys.push(self.mark_key(&format!("queue-alive:{name}")));
        }
        keys
    }

    /// One call of the queue script.
    fn queue_call<T: redis::FromRedisValue + Send + 'static>(
        &self,
        operation: &'static str,
        keys: Vec<String>,
        args: Vec<i64>,
    ) -> StoreFuture<'_, T> {
        let keys = Args::of(keys);
        let mut script_args = Args::of([&operation[6..]]);
        for arg in args {
            script_args.push_num(arg);
        }
        self.run(operation, move |inner, mut conn| async move {
            invoke(&inner.scripts.queue, &keys, &script_args, &mut conn).await
        })
    }
}

impl WaitQueues for RedisStore {
    fn join(
        &self,
        spots: Vec<QueueSpot>,
        only_if_busy: bool,
        alive_until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, QueueJoin> {
        let keys = self.queue_keys(spots.iter().map(|s| s.queue.as_str()));
        let mut args = vec![now, alive_until, i64::from(only_if_busy)];
        args.extend(spots.iter().map(|s| s.max_len.min(i64::MAX as u64) as i64));
        let call = self.queue_call::<(i64, i64)>("queue join", keys, args);
        StoreFuture::boxed(async move {
            Ok(match call.await? {
                (0, _) => QueueJoin::Clear,
                (1, ticket) => QueueJoin::Joined(ticket as u64),
                (_, index) => QueueJoin::Full(index as usize),
            })
        })
    }

    fn ahead(
        &self,
        queues: Vec<String>,
        ticket: u64,
        alive_until: Millis,
        now: Millis,
    ) -> StoreFuture<'_, Option<u64>> {
        let keys = self.queue_keys(queues.iter().map(String::as_str));
        let args = vec![now, alive_until, ticket as i64];
        let call = self.queue_call::<i64>("queue ahead", keys, args);
        StoreFuture::boxed(async move { Ok(u64::try_from(call.await?).ok()) })
    }

    fn leave(&self, queues: Vec<String>, ticket: u64) -> StoreFuture<'_, ()> {
        let keys = self.queue_keys(queues.iter().map(String::as_str));
        let call = self.queue_call::<i64>("queue leave", keys, vec![0, 0, ticket as i64]);
        StoreFuture::boxed(async move {
            call.await?;
            Ok(())
        })
    }

    fn length(&self, queue: String, now: Millis) -> StoreFuture<'_, u64> {
        let keys = self.queue_keys(std::iter::once(queue.as_str()));
        let call = self.queue_call::<i64>("queue length", keys, vec![now, now]);
        StoreFuture::boxed(async move { Ok(call.await?.max(0) as u64) })
    }
}
