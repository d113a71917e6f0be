//! Admission: what happens between a request and its ticket. `admission.rs` resolves the
//! path, reads, decides and fits; `actions.rs` applies a rule's action (degrade, throttle,
//! halt) around it; `wait_queue.rs` is the throttle's wait queue; `halts.rs` turns a refusal into
//! the caller's error. Admission holds its amounts through [`super::reserve`].

pub(crate) mod actions;
pub(crate) mod admission;
pub(crate) mod halts;
pub(crate) mod wait_queue;
