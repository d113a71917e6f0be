//! `ManualClock`: a clock tests and simulations set and advance.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString};

use crate::error::Error;
use crate::guard::domain::clock::{
    iso8601, parse_iso8601, Clock, ManualClock, Millis, SystemClock,
};

/// A clock that only moves when told to. Pass it to `Guard(..., clock=...)`.
#[pyclass(name = "ManualClock", module = "usage_guard._core", frozen)]
pub struct PyManualClock {
    pub inner: Arc<ManualClock>,
}

/// An instant from an ISO 8601 string, a `datetime` (naive datetimes are UTC) or a `date`
/// (midnight UTC): wherever an instant is asked, a date is one.
pub(crate) fn instant(value: &Bound<'_, PyAny>, name: &str) -> PyResult<Millis> {
    if let Ok(text) = value.cast::<PyString>() {
        let text: String = text.extract()?;
        let text = text.as_str();
        return parse_iso8601(text).ok_or_else(|| {
            Error::invalid(
                name,
                format!("{text:?}"),
                "is not a date or an ISO 8601 instant; accepted: e.g. \"2026-11-30\" (midnight \
                 UTC), \"2026-11-30T14:20:00Z\", a datetime or a date",
            )
            .into()
        });
    }
    if !value.hasattr("timestamp")? && value.hasattr("toordinal")? {
        // A `datetime.date` (a datetime has `timestamp` and is read below): its ISO form.
        let text: String = value.call_method0("isoformat")?.extract()?;
        if let Some(ms) = parse_iso8601(&text) {
            return Ok(ms);
        }
    }
    if value.hasattr("timestamp")? && value.hasattr("tzinfo")? {
        let py = value.py();
        let aware = if value.getattr("tzinfo")?.is_none() {
            let utc = py.import("datetime")?.getattr("timezone")?.getattr("utc")?;
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("tzinfo", utc)?;
            value.call_method("replace", (), Some(&kwargs))?
        } else {
            value.clone()
        };
        let seconds: f64 = aware.call_method0("timestamp")?.extract()?;
        return Ok((seconds * 1000.0).round() as Millis);
    }
    Err(Error::wrong_type(
        name,
        value.get_type(),
        "must be an ISO 8601 string, a datetime or a date",
    )
    .into())
}

/// One argument of `advance`: an int or a float, not a bool (absent: 0). NaN and
/// infinities pass here and are refused with the total, as a `ValueError`.
fn duration(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(0.0);
    };
    let number = (value.is_instance_of::<PyInt>() || value.is_instance_of::<PyFloat>())
        && !value.is_instance_of::<PyBool>();
    if !number {
        return Err(Error::wrong_type(
            name,
            value.repr()?,
            "must be a number of units to move the clock by (an int or a float)",
        )
        .into());
    }
    // An int too large for a double moves the clock out of range: refused with the total.
    Ok(value.extract::<f64>().unwrap_or(f64::INFINITY))
}

#[pymethods]
impl PyManualClock {
    /// A clock at `start` (ISO 8601 or datetime), or at the current time.
    #[new]
    #[pyo3(signature = (start = None))]
    fn new(start: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let now = match start {
            Some(s) => instant(s, "start")?,
            None => SystemClock.now_ms(),
        };
        Ok(Self {
            inner: Arc::new(ManualClock::new(now)),
        })
    }

    /// The clock's time as ISO 8601 UTC (whole seconds).
    fn now(&self) -> String {
        iso8601(self.inner.now_ms())
    }

    /// The clock's time in milliseconds since the epoch.
    fn now_ms(&self) -> i64 {
        self.inner.now_ms()
    }

    /// Moves the clock to `when` (ISO 8601 or datetime).
    fn set(&self, when: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.set(instant(when, "when")?);
        Ok(())
    }

    /// Moves the clock forward (or back, with negative values). Each argument is an int or
    /// a float (not a bool); the move must be finite and keep the clock in years 1 to 9999.
    #[pyo3(signature = (seconds = None, *, minutes = None, hours = None, days = None), text_signature = "($self, seconds=0.0, *, minutes=0.0, hours=0.0, days=0.0)")]
    fn advance(
        &self,
        seconds: Option<&Bound<'_, PyAny>>,
        minutes: Option<&Bound<'_, PyAny>>,
        hours: Option<&Bound<'_, PyAny>>,
        days: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let mut total = 0.0;
        for (name, value, unit) in [
            ("seconds", seconds, 1.0),
            ("minutes", minutes, 60.0),
            ("hours", hours, 3600.0),
            ("days", days, 86400.0),
        ] {
            total += duration(name, value)? * unit;
        }
        if !total.is_finite() {
            return Err(Error::invalid(
                "seconds",
                total,
                "the total of seconds, minutes, hours and days must be a finite number",
            )
            .into());
        }
        // Instants stay in years 1..=9999, where every window and ISO 8601 text is defined.
        const FIRST_MS: f64 = -62_135_596_800_000.0; // 0001-01-01T00:00:00Z
        const LAST_MS: f64 = 253_402_300_799_999.0; // 9999-12-31T23:59:59.999Z
        let target = self.inner.now_ms() as f64 + (total * 1000.0).round();
        if !(FIRST_MS..=LAST_MS).contains(&target) {
            return Err(Error::invalid(
                "seconds",
                total,
                "moves the clock outside the years 1 to 9999 (the total of seconds, minutes, \
                 hours and days, from the clock's instant)",
            )
            .into());
        }
        self.inner.advance((total * 1000.0).round() as i64);
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!("ManualClock({:?})", iso8601(self.inner.now_ms()))
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyManualClock>()
}
