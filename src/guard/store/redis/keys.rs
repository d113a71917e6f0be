//! The Redis keys of a store: every one under the store's hash tag `{<escaped prefix>}`; and
//! the keys and arguments of the reserve and settle scripts.

use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::rule::escape_id;
use crate::guard::store::{CounterKey, Fence, ReserveItem, Settle};

/// `{<escaped prefix>}:<kind>:`
pub(super) fn key_head(prefix: &str, kind: &str) -> String {
    let mut head = String::with_capacity(prefix.len() + 6);
    head.push('{');
    escape_id(prefix, &mut head);
    head.push_str("}:");
    head.push_str(kind);
    head.push(':');
    head
}

impl RedisStore {
    /// The Redis key of a counter: `{<prefix>}:c:<counter>:<bucket seconds>`. Ids are escaped
    /// (see `CounterId::render`), so no id can reach another counter's key or the hash tag.
    pub fn redis_key(&self, key: &CounterKey) -> String {
        let mut out = self.inner.key_head.clone();
        out.push_str(&key.render());
        out
    }

    /// The Redis key of a counter's holds (of every bucket): `{<prefix>}:h:<counter>`.
    pub fn holds_key(&self, key: &CounterKey) -> String {
        let mut out = self.inner.holds_head.clone();
        out.push_str(&key.id.render());
        out
    }

    /// The Redis key of a ticket's record: `{<prefix>}:t:<escaped ticket id>`.
    pub fn ticket_key(&self, ticket: &str) -> String {
        let mut out = self.inner.ticket_head.clone();
        escape_id(ticket, &mut out);
        out
    }

    /// The Redis key of a `mark_once` mark: `{<prefix>}:m:<escaped mark>`.
    pub fn mark_key(&self, mark: &str) -> String {
        let mut out = self.inner.mark_head.clone();
        escape_id(mark, &mut out);
        out
    }

    /// The keys and arguments of `reserve.lua` (with `fence.lua`'s at the end).
    pub(super) fn reserve_call(
        &self,
        ticket: &str,
        items: &[ReserveItem],
        expiry_minute: i64,
        now: Millis,
        fence: Fence,
    ) -> (Vec<String>, Vec<String>) {
        let mut redis_keys: Vec<String> = Vec::with_capacity(2 + items.len() * 2);
        redis_keys.push(self.ticket_key(ticket));
        let mut args: Vec<String> = Vec::with_capacity(4 + items.len() * 3);
        args.push(now.to_string());
        args.push(expiry_minute.to_string());
        for item in items {
            redis_keys.push(self.redis_key(&item.key));
            redis_keys.push(self.holds_key(&item.key));
            args.push(item.hold.to_string());
            args.push(item.limit.map(|l| l.to_string()).unwrap_or_default());
            args.push(item.carried.to_string());
        }
        // fence.lua takes these off the end: the epoch, the generation and one flag per key
        // (the ticket's record '0'; per item its bucket '1' and its holds 'h' when fenced).
        redis_keys.push(self.inner.epoch_key.clone());
        args.push(fence.generation);
        let mut flags = String::with_capacity(1 + items.len() * 2);
        flags.push('0');
        for i in 0..items.len() {
            let fenced = fence.fenced.get(i).copied().unwrap_or(false);
            flags.push_str(if fenced { "1h" } else { "00" });
        }
        args.push(flags);
        (redis_keys, args)
    }

    /// The keys and arguments of `settle.lua` (with `fence.lua`'s at the end); `None` when
    /// there is nothing to give back or add.
    pub(super) fn settle_call(
        &self,
        settle: &Settle,
        now: Millis,
    ) -> Option<(Vec<String>, Vec<String>)> {
        let holds: Vec<_> = settle.holds.iter().filter(|h| h.amount > 0).collect();
        let adds: Vec<_> = settle.adds.iter().filter(|a| a.amount > 0).collect();
        if holds.is_empty() && adds.is_empty() {
            return None;
        }
        let mut redis_keys: Vec<String> = Vec::with_capacity(2 + holds.len() + adds.len());
        redis_keys.push(self.ticket_key(&settle.id));
        redis_keys.push(self.ticket_key(&settle.ticket));
        let mut args: Vec<String> = Vec::with_capacity(4 + holds.len() + adds.len() * 2);
        args.push(now.to_string());
        args.push(settle.expiry_minute.to_string());
        args.push(holds.len().to_string());
        args.push(settle.settled_until.to_string());
        for hold in &holds {
            redis_keys.push(self.holds_key(&hold.key));
            // Negated here: settle.lua gives it back with HINCRBY as it is.
            args.push(format!("-{}", hold.amount));
        }
        for add in &adds {
            redis_keys.push(self.redis_key(&add.key));
            args.push(add.amount.to_string());
            args.push(add.retain_until.to_string());
        }
        // fence.lua takes these off the end: settle lists under the store's generation.
        redis_keys.push(self.inner.epoch_key.clone());
        args.extend([String::new(), String::new()]);
        Some((redis_keys, args))
    }
}
