//! The guard handle: a policy, a counter store, a clock and an optional ledger, shared by
//! clones. Its public methods are in `guard.rs`; the rooms add crate-private ones.

use std::sync::Arc;

use super::shared::Shared;

/// Admits calls against a policy, on a counter store, by a clock. Cheap to clone: clones
/// share the store, cache and stats.
#[derive(Clone)]
pub struct Guard {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("store", &self.shared.store)
            .field("policy_version", &self.policy_version())
            .finish()
    }
}
