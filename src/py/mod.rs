//! The PyO3 layer: `usage_guard._core`. It only converts types and maps errors; every
//! decision lives in the plain Rust core.

mod admit_args;
mod alive;
mod asyncio;
mod asyncio_batch;
mod audit;
mod batch;
mod ceiling;
mod clock;
mod convert;
mod errors;
mod events;
mod gateway;
mod guard;
mod guard_metrics;
mod json;
mod ledger;
mod policy;
mod provider;
mod provider_health;
mod pystr;
mod quota;
mod quota_db;
mod ratelimit;
mod redis_store;
mod store;
mod thread_state;
mod ticket;
mod usage;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    alive::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    clock::register(m)?;
    policy::register(m)?;
    store::register(m)?;
    redis_store::register(m)?;
    guard::register(m)?;
    events::register(m)?;
    ceiling::register(m)?;
    ledger::register(m)?;
    batch::register(m)?;
    usage::register(m)?;
    gateway::register(m)?;
    provider_health::register(m)?;
    quota::register(m)?;
    ratelimit::register(m)?;
    Ok(())
}
