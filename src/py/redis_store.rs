//! `usage_guard.RedisStore`: the Redis counter store as a Python object. Conversion only.

use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};

use crate::error::Error;
use crate::guard::store::{RedisStore, StoreError};

/// Counters in Redis (`RedisStore(url, prefix="ug")`) or Redis Cluster
/// (`RedisStore.cluster([urls], prefix="ug")`), shared by every guard, in any process, that
/// uses the same server and prefix. Connects on first use and reconnects by itself.
#[pyclass(name = "RedisStore", module = "usage_guard._core", frozen)]
pub struct PyRedisStore {
    pub inner: RedisStore,
    target: String,
    prefix: String,
}

/// A store that cannot be set up from `argument` (`url` or `urls`).
fn setup_error(argument: &str, given: &str, e: StoreError) -> Error {
    Error::invalid(argument, given, format!("cannot set up a Redis store: {e}"))
}

#[pymethods]
impl PyRedisStore {
    #[new]
    #[pyo3(signature = (url, prefix = "ug"))]
    fn new(url: &str, prefix: &str) -> PyResult<Self> {
        Ok(Self {
            inner: RedisStore::connect(url, prefix).map_err(|e| setup_error("url", url, e))?,
            target: url.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// A store on a Redis Cluster reachable through any of `urls`.
    #[classmethod]
    #[pyo3(signature = (urls, prefix = "ug"))]
    fn cluster(_cls: &Bound<'_, PyType>, urls: &Bound<'_, PyAny>, prefix: &str) -> PyResult<Self> {
        const ACCEPTED: &str = "must be a list of node URLs (str)";
        if urls.cast::<PyString>().is_ok() {
            return Err(Error::wrong_type("urls", urls.repr()?, ACCEPTED).into());
        }
        let urls: Vec<String> = urls
            .extract()
            .map_err(|_| Error::wrong_type("urls", urls.get_type(), ACCEPTED))?;
        let given = format!("{urls:?}");
        Ok(Self {
            inner: RedisStore::cluster(&urls, prefix)
                .map_err(|e| setup_error("urls", &given, e))?,
            target: format!("cluster {}", urls.join(",")),
            prefix: prefix.to_string(),
        })
    }

    /// The prefix (hash tag) every key of this store lives under.
    #[getter]
    fn prefix(&self) -> &str {
        &self.prefix
    }

    fn __repr__(&self) -> String {
        format!("RedisStore({:?}, prefix={:?})", self.target, self.prefix)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRedisStore>()
}
