//! `usage_guard.RedisStore`: the Redis counter store as a Python object. Conversion only.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString, PyType};

use crate::error::{url_without_password, Error};
use std::sync::Arc;

use crate::guard::store::{
    CounterStore, LeaseOptions, LeasedStore, RedisStore, StoreError, REDIS_TIMEOUT_RANGE,
};

/// Counters in Redis (`RedisStore(url, prefix="ug", timeout=None)`) or Redis Cluster
/// (`RedisStore.cluster([urls], prefix="ug", timeout=None)`), shared by every guard, in any
/// process, that uses the same server and prefix. Connects on first use and reconnects by
/// itself. `timeout` (seconds, 0.001 to 60; `None` is 1 s) bounds connecting and each
/// answer; one operation fails after at most 2.5 × `timeout`. `slot_groups=True` places each
/// owner's counters (a person's, a team's, a model's) under a hash tag of their own, so a
/// cluster spreads one store's load over its masters (docs/redis.md, "Slot groups").
/// `lease_above=N` leases a shared counter (a Model Total, a team's budget) once this process
/// reserves on it N times a second or more (0: at once): calls are checked against a slice
/// held here, and the store hears of them in batches (docs/redis.md, "Leases").
/// `functions=False` calls the store's scripts by SHA (`EVALSHA`) instead of loading them as
/// a Redis function library (docs/redis.md, "Scripts and functions").
#[pyclass(name = "RedisStore", module = "usage_guard._core", frozen)]
pub struct PyRedisStore {
    pub inner: RedisStore,
    /// What guards on this object use: `inner`, or `inner` leasing (one lease book for every
    /// guard of the process on this object).
    pub store: Arc<dyn CounterStore>,
    leased: Option<LeasedStore>,
    lease_above: Option<f64>,
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

/// The `lease_above` argument: calls per second, a finite number >= 0.
fn lease_above_of(value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
    const ACCEPTED: &str = "must be None or a number of calls per second >= 0";
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    let given = || value.repr().map(|r| r.to_string()).unwrap_or_default();
    if value.cast::<PyBool>().is_ok() {
        return Err(Error::wrong_type("lease_above", given(), ACCEPTED).into());
    }
    let rate: f64 = value
        .extract()
        .map_err(|_| Error::wrong_type("lease_above", given(), ACCEPTED))?;
    if !rate.is_finite() || rate < 0.0 {
        return Err(Error::invalid("lease_above", given(), ACCEPTED).into());
    }
    Ok(Some(rate))
}

/// The store guards use: `inner`, leasing above `lease_above` calls a second when set.
fn with_leases(
    inner: &RedisStore,
    lease_above: Option<f64>,
) -> (Arc<dyn CounterStore>, Option<LeasedStore>) {
    let plain: Arc<dyn CounterStore> = Arc::new(inner.clone());
    match lease_above {
        None => (plain, None),
        Some(rate) => {
            let options = LeaseOptions {
                above_per_second: rate,
                ..LeaseOptions::default()
            };
            let leased = LeasedStore::new(plain, options);
            (Arc::new(leased.clone()), Some(leased))
        }
    }
}

/// A store that cannot be set up from `argument` (`url` or `urls`).
fn setup_error(argument: &str, given: &str, e: StoreError) -> Error {
    let shown = url_without_password(given);
    Error::invalid(argument, shown, format!("cannot set up a Redis store: {e}"))
}

#[pymethods]
impl PyRedisStore {
    #[new]
    #[pyo3(signature = (url, prefix = "ug", timeout = None, *, slot_groups = false, lease_above = None, functions = true))]
    fn new(
        url: &str,
        prefix: &str,
        timeout: Option<&Bound<'_, PyAny>>,
        slot_groups: bool,
        lease_above: Option<&Bound<'_, PyAny>>,
        functions: bool,
    ) -> PyResult<Self> {
        let lease_above = lease_above_of(lease_above)?;
        let duration = timeout.map(timeout_of).transpose()?.unwrap_or(DEFAULT);
        let store = match slot_groups {
            true => RedisStore::connect_grouped(url, prefix, duration),
            false => RedisStore::connect_with_timeout(url, prefix, duration),
        };
        let inner = store.map_err(|e| setup_error("url", url, e))?;
        if !functions {
            inner.without_functions();
        }
        let (store, leased) = with_leases(&inner, lease_above);
        Ok(Self {
            inner,
            store,
            leased,
            lease_above,
            target: url.to_string(),
            prefix: prefix.to_string(),
            timeout: duration.as_secs_f64(),
            slot_groups,
        })
    }

    /// A store on a Redis Cluster reachable through any of `urls`.
    #[classmethod]
    #[pyo3(signature = (urls, prefix = "ug", timeout = None, *, slot_groups = false, lease_above = None, functions = true))]
    fn cluster(
        _cls: &Bound<'_, PyType>,
        urls: &Bound<'_, PyAny>,
        prefix: &str,
        timeout: Option<&Bound<'_, PyAny>>,
        slot_groups: bool,
        lease_above: Option<&Bound<'_, PyAny>>,
        functions: bool,
    ) -> PyResult<Self> {
        let lease_above = lease_above_of(lease_above)?;
        const ACCEPTED: &str = "must be a list of node URLs (str)";
        let duration = timeout.map(timeout_of).transpose()?.unwrap_or(DEFAULT);
        if urls.cast::<PyString>().is_ok() {
            let shown = url_without_password(&urls.repr()?.to_string());
            return Err(Error::wrong_type("urls", shown, ACCEPTED).into());
        }
        let urls: Vec<String> = urls
            .extract()
            .map_err(|_| Error::wrong_type("urls", urls.get_type(), ACCEPTED))?;
        let shown: Vec<String> = urls.iter().map(|u| url_without_password(u)).collect();
        let given = format!("{shown:?}");
        let store = match slot_groups {
            true => RedisStore::cluster_grouped(&urls, prefix, duration),
            false => RedisStore::cluster_with_timeout(&urls, prefix, duration),
        };
        let inner = store.map_err(|e| setup_error("urls", &given, e))?;
        if !functions {
            inner.without_functions();
        }
        let (store, leased) = with_leases(&inner, lease_above);
        Ok(Self {
            inner,
            store,
            leased,
            lease_above,
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

    /// Whether the store calls its scripts as a Redis function library now: `False` when
    /// made with `functions=False`, or once the server turned out to have no functions or
    /// would not load the library (then it calls them by SHA).
    #[getter]
    fn functions(&self) -> bool {
        self.inner.uses_functions()
    }

    /// The call rate (per second, on one counter) above which shared counters are leased;
    /// `None`: never.
    #[getter]
    fn lease_above(&self) -> Option<f64> {
        self.lease_above
    }

    /// This process's leases on the store: `{"leases": n, "unused": amount}`, the counters
    /// leased now and what their slices hold that no open call took (headroom other guards
    /// cannot use meanwhile; in each counter's own unit, summed).
    fn lease_state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        let (leases, unused) = self
            .leased
            .as_ref()
            .map_or((0, 0), |l| (l.leases(), l.unused()));
        out.set_item("leases", leases)?;
        out.set_item("unused", unused)?;
        Ok(out)
    }

    /// Gives back this process's leases on the store (what no open call took), adding the
    /// use billed against them; answers how many could not be given back. `Guard.close()`
    /// and interpreter exit do this too.
    fn give_back_leases(&self, py: Python<'_>) -> usize {
        match &self.leased {
            None => 0,
            Some(leased) => {
                let leased = leased.clone();
                py.detach(move || {
                    let _runtime = crate::runtime::shared().enter();
                    crate::runtime::block_on(leased.give_back())
                })
            }
        }
    }

    /// Copies the counters and holds of this prefix's shared-layout store into this store's
    /// slot groups, never lowering what is there (safe to run twice); returns what it read
    /// and copied (`Migrated`). A store without slot groups raises `ValueError`; a store that
    /// does not answer, `UsageLimitsUnavailable` naming the cause.
    fn migrate_from_shared<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if !self.slot_groups {
            let accepted = "migrate_from_shared needs a store made with slot_groups=True";
            return Err(Error::invalid("slot_groups", "False", accepted).into());
        }
        let store = self.inner.clone();
        let done = py.detach(move || crate::runtime::block_on(store.migrate_from_shared()));
        let done = done.map_err(|e| {
            let mut refusal = crate::guard::domain::refusal::Refusal::unavailable();
            refusal.message = format!(
                "the migration did not finish ({}); run it again: a second run copies only \
                 what the first did not",
                e.0
            );
            Error::Refused(Box::new(refusal))
        })?;
        let out = PyDict::new(py);
        out.set_item("read", done.read)?;
        out.set_item("counters", done.counters)?;
        out.set_item("holds", done.holds)?;
        out.set_item("filled", done.filled)?;
        out.set_item("skipped", done.skipped)?;
        Ok(out)
    }

    fn __repr__(&self) -> String {
        let groups = if self.slot_groups {
            ", slot_groups=True"
        } else {
            ""
        };
        let leases = self
            .lease_above
            .map(|rate| format!(", lease_above={rate}"))
            .unwrap_or_default();
        let functions = match self.inner.uses_functions() {
            true => "",
            false => ", functions=False",
        };
        format!(
            "RedisStore({:?}, prefix={:?}, timeout={}{groups}{leases}{functions})",
            self.target, self.prefix, self.timeout
        )
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRedisStore>()
}
