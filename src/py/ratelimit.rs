//! `ratelimit_fields`: the IETF `RateLimit-Policy` / `RateLimit` fields for the rules of a
//! usage view, written by the same core function as the gateway's (`domain::ratelimit`).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::clock::instant;
use super::convert::{whole_in, Range};
use crate::error::Error;
use crate::guard::domain::clock::{Clock, SystemClock};
use crate::guard::domain::ratelimit::{fields, tightest, Reported, REPORTED};
use crate::guard::domain::rule::Metric;
use crate::guard::domain::window::Window;

/// `rule[key]`, required.
fn item<'py>(rule: &Bound<'py, PyDict>, at: &str, key: &str) -> PyResult<Bound<'py, PyAny>> {
    rule.get_item(key)?.ok_or_else(|| {
        Error::invalid(
            &format!("{at}.{key}"),
            "missing",
            "is required (a usage view rule)",
        )
        .into()
    })
}

/// A rule of a usage view (`metric`, `window`, `amount`, `left`, `resets_at`) as reported;
/// `None` for a metric the headers do not report.
fn reported(rule: &Bound<'_, PyAny>, at: &str) -> PyResult<Option<Reported>> {
    let rule = rule.cast::<PyDict>().map_err(|_| {
        Error::wrong_type(at, rule.get_type(), "must be a dict (a usage view rule)")
    })?;
    let word: String = item(rule, at, "metric")?.extract()?;
    let metric = word.parse::<Metric>().map_err(|_| {
        Error::invalid(
            &format!("{at}.metric"),
            format!("{word:?}"),
            "is not a metric",
        )
    })?;
    if !REPORTED.contains(&metric) {
        return Ok(None);
    }
    let text: String = item(rule, at, "window")?.extract()?;
    // An anchored window's words ("day from 09:00 Europe/Paris") do not carry its length:
    // reported without `w`, never refused (the view is the guard's own).
    let window = match text.parse::<Window>().ok() {
        Some(w) => Some(w),
        None if text == "running" => Some(Window::WhileRunning),
        None if text.contains(" from ") => None,
        None => {
            let what = "is not a window (a usage view rule's window)";
            return Err(Error::invalid(&format!("{at}.window"), format!("{text:?}"), what).into());
        }
    };
    let limit = whole_in(
        &format!("{at}.amount"),
        &item(rule, at, "amount")?,
        Range::Count,
    )?;
    let remaining = whole_in(
        &format!("{at}.left"),
        &item(rule, at, "left")?,
        Range::Count,
    )?;
    let resets_at = match rule.get_item("resets_at")? {
        Some(v) if !v.is_none() => Some(instant(&v, &format!("{at}.resets_at"))?),
        _ => None,
    };
    Ok(Some(Reported {
        metric,
        window,
        limit,
        remaining,
        resets_at,
    }))
}

/// `[("ratelimit-policy", …), ("ratelimit", …)]` for the tightest requests, tokens and cost
/// rule among `rules` (a usage view's `rules` and `ceilings`), at `now` (an ISO 8601 instant
/// or a datetime; the system clock when absent). Empty when no rule is of those metrics.
#[pyfunction]
#[pyo3(signature = (rules, now = None))]
fn ratelimit_fields(
    rules: &Bound<'_, PyList>,
    now: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<(String, String)>> {
    let now = match now.filter(|n| !n.is_none()) {
        Some(n) => instant(n, "now")?,
        None => SystemClock.now_ms(),
    };
    let mut read = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        read.extend(reported(&rule, &format!("rules[{i}]"))?);
    }
    Ok(fields(&tightest(read), now))
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ratelimit_fields, m)?)
}
