//! Provider health from Python: the wrappers' fallback ladder asks a guard whether a
//! provider's credential may take a call and records each call's outcome, in the same book
//! (and store notes) the gateway uses.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::guard::PyGuard;
use crate::guard::domain::clock::iso8601;
use crate::guard::domain::health::{Outcome, Transition, Unavailable};

fn unavailable_to_py<'py>(py: Python<'py>, u: &Unavailable) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("provider", &u.provider)?;
    d.set_item("credential", u.credential.as_deref())?;
    d.set_item("reason", u.reason.as_str())?;
    d.set_item("until", iso8601(u.until))?;
    d.set_item("until_ms", u.until)?;
    Ok(d)
}

/// `None` when a call through `credential` of `provider` may go now, else why not (a dict
/// of provider, credential, reason, until, until_ms). `take=True` takes a half-open probe.
#[pyfunction]
#[pyo3(signature = (guard, provider, credential = "default", take = false))]
fn provider_available<'py>(
    py: Python<'py>,
    guard: &Bound<'py, PyGuard>,
    provider: &str,
    credential: &str,
    take: bool,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let guard = guard.get().inner.clone();
    let (p, c) = (provider.to_string(), credential.to_string());
    let answer = py.detach(move || {
        crate::runtime::block_on(async {
            if take {
                guard.health().take(&p, &c).await
            } else {
                guard.health().available(&p, &c).await
            }
        })
    });
    match answer {
        Ok(()) => Ok(None),
        Err(u) => Ok(Some(unavailable_to_py(py, &u)?)),
    }
}

/// Records a call's outcome: `status` is the provider's HTTP status (None: a timeout or a
/// connection fault), `error` its error code or message, `headers` its answer's headers
/// (a cooldown's timing), `caller` who made the call (a breaker opens only on failures of
/// more than one caller; None is one caller of its own). Returns {outcome, opened_until_ms,
/// closed, cooldown_ms, asked_ms, clamped}.
#[pyfunction]
#[pyo3(signature = (guard, provider, credential = "default", status = None, error = None, headers = None, caller = None))]
#[allow(clippy::too_many_arguments)]
fn provider_record<'py>(
    py: Python<'py>,
    guard: &Bound<'py, PyGuard>,
    provider: &str,
    credential: &str,
    status: Option<u16>,
    error: Option<&str>,
    headers: Option<Vec<(String, String)>>,
    caller: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let outcome = Outcome::classify(status, error);
    let guard = guard.get().inner.clone();
    let (p, c, h) = (
        provider.to_string(),
        credential.to_string(),
        headers.unwrap_or_default(),
    );
    let who = caller.unwrap_or_default();
    let now = guard.clock().now_ms();
    let recorded = py
        .detach(move || crate::runtime::block_on(guard.health().record(&p, &c, &who, outcome, &h)));
    let d = PyDict::new(py);
    d.set_item("outcome", outcome.as_str())?;
    let opened = match recorded.transition {
        Transition::Opened(until) => Some(until),
        _ => None,
    };
    d.set_item("opened_until_ms", opened)?;
    d.set_item("closed", recorded.transition == Transition::Closed)?;
    d.set_item("cooldown_ms", recorded.cooldown.map(|c| c.until - now))?;
    d.set_item("asked_ms", recorded.cooldown.map(|c| c.timing.asked_ms))?;
    d.set_item(
        "clamped",
        recorded.cooldown.is_some_and(|c| c.timing.clamped()),
    )?;
    Ok(d)
}

/// What the guard knows of provider health now: {"breakers": {provider: state},
/// "cooled": [{provider, credential, reason, until}]}.
#[pyfunction]
fn provider_health<'py>(
    py: Python<'py>,
    guard: &Bound<'py, PyGuard>,
) -> PyResult<Bound<'py, PyDict>> {
    let snapshot = guard.get().inner.health().snapshot();
    let breakers = PyDict::new(py);
    for (provider, state) in &snapshot.breakers {
        breakers.set_item(provider, state.as_str())?;
    }
    let cooled = PyList::empty(py);
    for c in &snapshot.cooled {
        let d = PyDict::new(py);
        d.set_item("provider", &c.provider)?;
        d.set_item("credential", &c.credential)?;
        d.set_item("reason", c.reason.as_str())?;
        d.set_item("until", iso8601(c.until))?;
        cooled.append(d)?;
    }
    let d = PyDict::new(py);
    d.set_item("breakers", breakers)?;
    d.set_item("cooled", cooled)?;
    Ok(d)
}

/// The fallback ladder of `model`: (model, provider word) of it and of each of its policy
/// `fallbacks`, in order (`default_provider` for a model the policy does not list).
#[pyfunction]
fn model_ladder(
    guard: &Bound<'_, PyGuard>,
    model: &str,
    default_provider: &str,
) -> Vec<(String, String)> {
    let policy = guard.get().inner.policy();
    policy
        .ladder(model)
        .into_iter()
        .map(|(m, p)| {
            (
                m,
                p.map_or(default_provider.to_string(), |p| p.as_str().to_string()),
            )
        })
        .collect()
}

/// Adds the provider health functions to `_core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(provider_available, m)?)?;
    m.add_function(wrap_pyfunction!(provider_record, m)?)?;
    m.add_function(wrap_pyfunction!(provider_health, m)?)?;
    m.add_function(wrap_pyfunction!(model_ladder, m)?)
}
