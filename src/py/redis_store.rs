//! `usage_guard.RedisStore`: the Redis counter store as a Python object. Conversion only.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString, PyType};

use crate::error::Error;
use crate::guard::store::{RedisStore, StoreError, REDIS_TIMEOUT_RANGE};

/// Counters in Redis (`RedisStore(url, prefix="ug", timeout=None)`) or Redis Cluster
/// (`RedisStore.cluster([urls], prefix="ug", timeout=None)`), shared by every guard, in any
/// process, that uses the same server and prefix. Connects on first use and reconnects by
/// itself. `timeout` (seconds, 0.001 to 60; `None` is 1 s) bounds connecting and each
/// answer; one operation fails after at most 2.5 × `timeout`. `slot_groups=True` places each
/// owner's counters (a person's, a team's, a model's) under a hash tag of their own, so a
/// cluster spreads one store's load over its masters (docs/redis.md, "Slot groups").
#[pyclass(name = "RedisStore", module = "usage_guard._core", frozen)]
pub struct PyRedisStore {
    pub inner: RedisStore,
    target: String,
    prefix: String,
    timeout: f64,
    slot_groups: bool,
}

/// The `timeout` argument as a duration in the accepted range.
fn timeout_of(value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    const ACCEPTED: &str = "must be a number of seconds from 0.001 to 60";
    let given = || value.repr().map(|r| r.to_string()).unwrap_or_default();
    if value.cast::<PyBool>().is_ok() {
        return Err(Error::wrong_type("timeout", given(), ACCEPTED).into());
    }
    let seconds: f64 = value
        .extract()
        .map_err(|_| Error::wrong_type("timeout", given(), ACCEPTED))?;
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| REDIS_TIMEOUT_RANGE.contains(d))
        .ok_or_else(|| Error::invalid("timeout", given(), ACCEPTED).into())
}

const DEFAULT: Duration = crate::guard::store::REDIS_TIMEOUT;

/// A store that cannot be set up from `argument` (`url` or `urls`).
fn setup_error(argument: &str, given: &str, e: StoreError) -> Error {
    Error::invalid(argument, given, format!("cannot set up a Redis store: {e}"))
}

#[pymethods]
impl PyRedisStore {
    #[new]
    #[pyo3(signature = (url, prefix = "ug", timeout = None, *, slot_groups = false))]
    fn new(
        url: &str,
        prefix: &str,
        timeout: Option<&Bound<'_, PyAny>>,
        slot_groups: bool,
    ) -> PyResult<Self> {
        let duration = timeout.map(timeout_of).transpose()?.unwrap_or(DEFAULT);
        let store = match slot_groups {
            true => RedisStore::connect_grouped(url, prefix, duration),
            false => RedisStore::connect_with_timeout(url, prefix, duration),
        };
        Ok(Self {
            inner: store.map_err(|e| setup_error("url", url, e))?,
            target: url.to_string(),
            prefix: prefix.to_string(),
            timeout: duration.as_secs_f64(),
            slot_groups,
        })
    }

    /// A store on a Redis Cluster reachable through any of `urls`.
    #[classmethod]
    #[pyo3(signature = (urls, prefix = "ug", timeout = None, *, slot_groups = false))]
    fn cluster(
        _cls: &Bound<'_, PyType>,
        urls: &Bound<'_, PyAny>,
        prefix: &str,
        timeout: Option<&Bound<'_, PyAny>>,
        slot_groups: bool,
    ) -> PyResult<Self> {
        const ACCEPTED: &str = "must be a list of node URLs (str)";
        let duration = timeout.map(timeout_of).transpose()?.unwrap_or(DEFAULT);
        if urls.cast::<PyString>().is_ok() {
            return Err(Error::wrong_type("urls", urls.repr()?, ACCEPTED).into());
        }
        let urls: Vec<String> = urls
            .extract()
            .map_err(|_| Error::wrong_type("urls", urls.get_type(), ACCEPTED))?;
        let given = format!("{urls:?}");
        let store = match slot_groups {
            true => RedisStore::cluster_grouped(&urls, prefix, duration),
            false => RedisStore::cluster_with_timeout(&urls, prefix, duration),
        };
        Ok(Self {
            inner: store.map_err(|e| setup_error("urls", &given, e))?,
            target: format!("cluster {}", urls.join(",")),
            prefix: prefix.to_string(),
            timeout: duration.as_secs_f64(),
            slot_groups,
        })
    }

    /// The prefix (hash tag) every key of this store lives under.
    #[getter]
    fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How long connecting, and each answer, may take (seconds).
    #[getter]
    fn timeout(&self) -> f64 {
        self.timeout
    }

    /// Whether each owner's counters have a slot group (hash tag) of their own.
    #[getter]
    fn slot_groups(&self) -> bool {
        self.slot_groups
    }

    /// Copies the counters and holds of this prefix's shared-layout store into this store's
    /// slot groups, never lowering what is there (safe to run twice); returns
    /// `{"counters": n, "holds": n}` copied. A store without slot groups raises `ValueError`;
    /// a store that does not answer, `UsageLimitsUnavailable`.
    fn migrate_from_shared<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if !self.slot_groups {
            let accepted = "migrate_from_shared needs a store made with slot_groups=True";
            return Err(Error::invalid("slot_groups", "False", accepted).into());
        }
        let store = self.inner.clone();
        let done = py.detach(move || crate::runtime::block_on(store.migrate_from_shared()));
        let done = done.map_err(|e| {
            log::warn!("migrate_from_shared: {e}");
            Error::Refused(Box::new(
                crate::guard::domain::refusal::Refusal::unavailable(),
            ))
        })?;
        let out = PyDict::new(py);
        out.set_item("counters", done.counters)?;
        out.set_item("holds", done.holds)?;
        Ok(out)
    }

    fn __repr__(&self) -> String {
        let groups = if self.slot_groups {
            ", slot_groups=True"
        } else {
            ""
        };
        format!(
            "RedisStore({:?}, prefix={:?}, timeout={}{groups})",
            self.target, self.prefix, self.timeout
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRedisStore>()
}
