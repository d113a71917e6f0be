//! `QuotaDatabase`: the connection the quota service's tables use, in a ledger's database.

use crate::lock::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use super::ledger::quota_db_at;
use crate::error::Error;
use crate::guard::ledger::{LedgerError, QuotaDb, QuotaDbAt, SqlValue};

fn value_of(v: &Bound<'_, PyAny>) -> PyResult<SqlValue> {
    if v.is_none() {
        Ok(SqlValue::Null)
    } else if let Ok(b) = v.extract::<bool>() {
        Ok(SqlValue::Int(b.into()))
    } else if let Ok(i) = v.extract::<i64>() {
        Ok(SqlValue::Int(i))
    } else if let Ok(f) = v.extract::<f64>() {
        Ok(SqlValue::Real(f))
    } else if let Ok(s) = v.extract::<String>() {
        Ok(SqlValue::Text(s))
    } else {
        let why = "accepted: None, int, float, str";
        Err(Error::wrong_type("params", v.get_type(), why).into())
    }
}

fn value_to_py<'py>(py: Python<'py>, v: &SqlValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        SqlValue::Null => py.None().into_bound(py),
        SqlValue::Int(i) => i.into_pyobject(py)?.into_any(),
        SqlValue::Real(f) => f.into_pyobject(py)?.into_any(),
        SqlValue::Text(s) => s.into_pyobject(py)?.into_any(),
    })
}

/// A connection to the database of a `SqliteLedger` or `PostgresLedger`, of its own (opened
/// at the first statement, again after a lost connection), for the quota service's tables;
/// without a ledger, an in-memory SQLite database of this object only.
#[pyclass(name = "QuotaDatabase", module = "usage_guard._core", frozen)]
pub struct PyQuotaDatabase {
    db: Mutex<QuotaDb>,
    dialect: &'static str,
}

#[pymethods]
impl PyQuotaDatabase {
    #[new]
    #[pyo3(signature = (ledger = None))]
    fn new(ledger: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let at = match ledger.filter(|l| !l.is_none()) {
            Some(ledger) => quota_db_at(ledger)?,
            None => QuotaDbAt::Sqlite(":memory:".into()),
        };
        let db = QuotaDb::new(at);
        let dialect = db.dialect();
        Ok(Self {
            db: Mutex::new(db),
            dialect,
        })
    }

    /// Creates the quota tables, or runs the migrations this database lacks (the ledger
    /// layer owns them), in one transaction.
    fn migrate(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.db.lock().migrate())
            .map_err(|LedgerError(e)| Error::Ledger(e))?;
        Ok(())
    }

    /// `"sqlite"` or `"postgres"`: placeholders are `?` or `$1`, `$2` ….
    #[getter]
    fn dialect(&self) -> &'static str {
        self.dialect
    }

    /// Runs one statement with its parameters; the rows as tuples. `BEGIN`, `COMMIT` and
    /// `ROLLBACK` make transactions (one connection: the caller serialises them).
    #[pyo3(signature = (sql, params = None))]
    fn execute<'py>(
        &self,
        py: Python<'py>,
        sql: String,
        params: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut values = Vec::new();
        if let Some(params) = params.filter(|p| !p.is_none()) {
            for p in params.try_iter()? {
                values.push(value_of(&p?)?);
            }
        }
        let rows = py
            .detach(|| self.db.lock().execute(&sql, &values))
            .map_err(|LedgerError(e)| Error::Ledger(e))?;
        let out = PyList::empty(py);
        for row in &rows {
            let items: PyResult<Vec<_>> = row.iter().map(|v| value_to_py(py, v)).collect();
            out.append(PyTuple::new(py, items?)?)?;
        }
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!("QuotaDatabase({})", self.dialect)
    }
}

/// Adds `QuotaDatabase` to `_core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyQuotaDatabase>()
}
