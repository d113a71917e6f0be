//! The Redis keys of a store, and the keys and arguments of the reserve and settle scripts.
//!
//! Every key is under a hash tag. In the shared layout every key of a store is under
//! `{<escaped prefix>}`; with slot groups (`groups.rs`) a counter's keys are under its
//! owner's tag `{<escaped prefix>:2:<owner>}` and the rest (epoch, marks, queues) under
//! `{<escaped prefix>:2}`.

use std::fmt::Write as _;

use super::args::Args;
use super::RedisStore;
use crate::guard::domain::clock::Millis;
use crate::guard::domain::rule::{escape_id, CounterId};
use crate::guard::store::{CounterKey, Fence, ReserveItem, Settle, UsageAdd};

/// `{<escaped prefix><version>}`: the tag of a store's own keys (`version` is "" for the
/// shared layout, ":2" for slot groups).
pub(super) fn home_tag(prefix: &str, version: &str) -> String {
    let mut tag = String::with_capacity(prefix.len() + 8);
    tag.push('{');
    escape_id(prefix, &mut tag);
    tag.push_str(version);
    tag.push('}');
    tag
}

/// `<tag>:<kind>:`
pub(super) fn key_head(tag: &str, kind: &str) -> String {
    format!("{tag}:{kind}:")
}

impl RedisStore {
    /// The Redis key of a counter: `{<prefix>}:c:<counter>:<bucket seconds>`. Ids are escaped
    /// (see `CounterId::render`), so no id can reach another counter's key or the hash tag.
    pub fn redis_key(&self, key: &CounterKey) -> String {
        let mut out = String::with_capacity(96);
        self.write_redis_key(key, &mut out);
        out
    }

    /// Appends [`RedisStore::redis_key`] to `out`.
    pub(super) fn write_redis_key(&self, key: &CounterKey, out: &mut String) {
        self.write_tag(&key.id, out);
        out.push_str(":c:");
        key.render_into(out);
    }

    /// Appends the hash tag of counter `id`'s keys: the store's own, or with slot groups its
    /// owner's.
    pub(super) fn write_tag(&self, id: &CounterId, out: &mut String) {
        match &self.inner.group_head {
            Some(head) => {
                out.push_str(head);
                id.write_owner(out);
                out.push('}');
            }
            None => out.push_str(&self.inner.home),
        }
    }

    /// The hash tag of counter `id`'s keys (`write_tag`).
    pub(super) fn tag_of(&self, id: &CounterId) -> String {
        let mut tag = String::with_capacity(48);
        self.write_tag(id, &mut tag);
        tag
    }

    /// The Redis key of a counter's holds (of every bucket): `<tag>:h:<counter>`.
    pub fn holds_key(&self, key: &CounterKey) -> String {
        let mut out = String::with_capacity(96);
        self.write_holds_key(key, &mut out);
        out
    }

    /// Appends [`RedisStore::holds_key`] to `out`.
    pub(super) fn write_holds_key(&self, key: &CounterKey, out: &mut String) {
        self.write_tag(&key.id, out);
        out.push_str(":h:");
        key.id.render_into(out);
    }

    /// The Redis key of a ticket's record under the store's own tag:
    /// `{<prefix>}:t:<escaped ticket id>` (with slot groups each group keeps its own record
    /// of a ticket, under the group's tag).
    pub fn ticket_key(&self, ticket: &str) -> String {
        let mut out = String::with_capacity(64);
        write_ticket_key(&self.inner.home, ticket, &mut out);
        out
    }

    /// The Redis key of a `mark_once` mark: `<store tag>:m:<escaped mark>`.
    pub fn mark_key(&self, mark: &str) -> String {
        let mut out = self.inner.mark_head.clone();
        escape_id(mark, &mut out);
        out
    }

    /// The keys and arguments of `reserve.lua` (with `fence.lua`'s at the end).
    pub(super) fn reserve_call(
        &self,
        tag: &str,
        ticket: &str,
        items: &[ReserveItem],
        expiry_minute: i64,
        now: Millis,
        fence: Fence,
    ) -> (Args, Args) {
        let mut redis_keys = Args::with_capacity(2 + items.len() * 2, 96 * (2 + items.len() * 2));
        redis_keys.push_with(|out| write_ticket_key(tag, ticket, out));
        let mut args = Args::with_capacity(4 + items.len() * 3, 16 * (4 + items.len() * 3));
        args.push_num(now);
        args.push_num(expiry_minute);
        for item in items {
            redis_keys.push_with(|out| self.write_redis_key(&item.key, out));
            redis_keys.push_with(|out| self.write_holds_key(&item.key, out));
            args.push_num(item.hold);
            match item.limit {
                Some(limit) => args.push_num(limit),
                None => args.push(""),
            }
            args.push_num(item.carried);
        }
        // fence.lua takes these off the end: the epoch, the generation and one flag per key
        // (the ticket's record '0'; per item its bucket '1' and its holds 'h' when fenced).
        redis_keys.push_with(|out| write_epoch_key(tag, out));
        args.push(&fence.generation);
        args.push_with(|flags| {
            flags.push('0');
            for i in 0..items.len() {
                let fenced = fence.fenced.get(i).copied().unwrap_or(false);
                flags.push_str(if fenced { "1h" } else { "00" });
            }
        });
        (redis_keys, args)
    }

    /// Per use added (`fence_add_use` in fence.lua): its bucket's key, and the amount and
    /// retain-until as arguments.
    pub(super) fn push_adds<'a>(
        &self,
        adds: impl Iterator<Item = &'a UsageAdd>,
        keys: &mut Args,
        args: &mut Args,
    ) {
        for add in adds {
            keys.push_with(|out| self.write_redis_key(&add.key, out));
            args.push_num(add.amount);
            args.push_num(add.retain_until);
        }
    }

    /// The keys and arguments of `settle.lua` (with `fence.lua`'s at the end); `None` when
    /// there is nothing to give back or add.
    pub(super) fn settle_call(
        &self,
        tag: &str,
        settle: &Settle,
        now: Millis,
    ) -> Option<(Args, Args)> {
        let holds = settle.holds.iter().filter(|h| h.amount > 0);
        let adds = settle.adds.iter().filter(|a| a.amount > 0);
        let (hold_count, add_count) = (holds.clone().count(), adds.clone().count());
        if hold_count == 0 && add_count == 0 {
            return None;
        }
        let keys = 3 + hold_count + add_count;
        let mut redis_keys = Args::with_capacity(keys, 96 * keys);
        redis_keys.push_with(|out| write_ticket_key(tag, &settle.id, out));
        redis_keys.push_with(|out| write_ticket_key(tag, &settle.ticket, out));
        let mut args = Args::with_capacity(6 + hold_count + add_count * 2, 256);
        args.push_num(now);
        args.push_num(settle.expiry_minute);
        args.push_num(hold_count);
        args.push_num(settle.settled_until);
        for hold in holds {
            redis_keys.push_with(|out| self.write_holds_key(&hold.key, out));
            // Negated here: settle.lua gives it back with HINCRBY as it is.
            args.push_with(|out| {
                let _ = write!(out, "-{}", hold.amount);
            });
        }
        self.push_adds(adds, &mut redis_keys, &mut args);
        // fence.lua takes these off the end: settle lists under the store's generation.
        redis_keys.push_with(|out| write_epoch_key(tag, out));
        args.push("");
        args.push("");
        Some((redis_keys, args))
    }
}

/// Appends the key of ticket `ticket`'s record under `tag`: `<tag>:t:<escaped ticket id>`.
pub(super) fn write_ticket_key(tag: &str, ticket: &str, out: &mut String) {
    out.push_str(tag);
    out.push_str(":t:");
    escape_id(ticket, out);
}

/// Appends the key of the epoch under `tag`: `<tag>:epoch` (with slot groups, each group's
/// copy of the store's epoch, `groups.rs`).
pub(super) fn write_epoch_key(tag: &str, out: &mut String) {
    out.push_str(tag);
    out.push_str(":epoch");
}
