//! The Redis keys of a store: every one under the store's hash tag `{<escaped prefix>}`.

use super::RedisStore;
use crate::guard::domain::rule::escape_id;
use crate::guard::store::CounterKey;

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
}
