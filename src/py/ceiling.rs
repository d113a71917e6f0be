//! Python bindings of the usage ceiling: `count_tokens`, `count_prompt`, `fit`, `FitResult`,
//! `usage_capped`, `intersect_ceilings`. Conversions only; the logic is `crate::ceiling`.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt};
use serde_json::Value;

use super::convert::{ceiling_to_py, json_to_py, py_to_json, whole, Range};
use super::policy::PyPolicy;
use super::provider::Provider;
use crate::ceiling::{self, Api, Encoding, FitOptions, FitResult};
use crate::error::Error;
use crate::guard::domain::decide::UsageCeiling;
use crate::guard::domain::policy::{ModelSpec, Prices};

/// Texts longer than this are tokenized with the GIL released.
const DETACH_BYTES: usize = 4096;

fn count_u64(d: &Bound<'_, PyDict>, key: &str, required: bool) -> PyResult<Option<u64>> {
    let path = format!("ceiling.{key}");
    match d.get_item(key)? {
        None if required => {
            Err(Error::invalid(&path, "", format!("is required; {}", Range::Count.words())).into())
        }
        None => Ok(None),
        Some(v) => whole(&path, Some(&v), Range::Count),
    }
}

/// A number (int or float, not bool) that is finite and ≥ 0: another type is a `TypeError`,
/// NaN, infinities and negatives a `ValueError`.
fn number(v: &Bound<'_, PyAny>, path: &str) -> PyResult<f64> {
    let accepted = "must be a finite number of 0 or more (an int or a float)";
    let ok = (v.is_instance_of::<PyInt>() || v.is_instance_of::<PyFloat>())
        && !v.is_instance_of::<PyBool>();
    if !ok {
        return Err(Error::wrong_type(path, v.repr()?, accepted).into());
    }
    // An int too large for a double is out of range, not an error of another kind.
    let f = v.extract::<f64>().unwrap_or(f64::INFINITY);
    if !(f.is_finite() && f >= 0.0) {
        return Err(Error::invalid(path, v.repr()?, accepted).into());
    }
    Ok(f)
}

/// The `usage_ceiling` dict (the keys of `Ticket.ceiling`) as the core's `UsageCeiling`.
/// Rates are dollars per million tokens.
pub(crate) fn ceiling_from_py(value: &Bound<'_, PyAny>) -> PyResult<UsageCeiling> {
    let d = value.cast::<PyDict>().map_err(|_| {
        Error::wrong_type(
            "ceiling",
            "",
            "must be a dict with tokens, cost_micros, rates, max_output_tokens, \
             min_output_tokens, margin (a ticket's .ceiling)",
        )
    })?;
    const KEYS: [&str; 6] = [
        "tokens",
        "cost_micros",
        "rates",
        "max_output_tokens",
        "min_output_tokens",
        "margin",
    ];
    for k in d.keys() {
        let k: String = k.extract()?;
        if !KEYS.contains(&k.as_str()) {
            let accepted = format!("is not a ceiling key; accepted: {}", KEYS.join(", "));
            return Err(Error::invalid(&format!("ceiling.{k}"), "", accepted).into());
        }
    }
    let rates = match d.get_item("rates")? {
        Some(r) if !r.is_none() => {
            let r = r.cast::<PyDict>().map_err(|_| {
                Error::wrong_type(
                    "ceiling.rates",
                    "",
                    "must be a dict of input, cached_input, output",
                )
            })?;
            let price = |key: &str| -> PyResult<u64> {
                match r.get_item(key)? {
                    Some(v) if !v.is_none() => {
                        Ok((number(&v, &format!("ceiling.rates.{key}"))? * 1e6).round() as u64)
                    }
                    _ => Ok(0),
                }
            };
            let input = price("input")?;
            let cached = match r.get_item("cached_input")? {
                Some(v) if !v.is_none() => price("cached_input")?,
                _ => input,
            };
            Some(Prices {
                input,
                cached_input: cached,
                output: price("output")?,
            })
        }
        _ => None,
    };
    let margin = match d.get_item("margin")? {
        Some(v) if !v.is_none() => number(&v, "ceiling.margin")?,
        _ => 0.05,
    };
    Ok(UsageCeiling {
        tokens: count_u64(d, "tokens", false)?,
        cost_micros: count_u64(d, "cost_micros", false)?,
        rates,
        max_output_tokens: count_u64(d, "max_output_tokens", true)?.unwrap_or(0),
        min_output_tokens: count_u64(d, "min_output_tokens", false)?.unwrap_or(256),
        margin,
    })
}

fn spec_for(policy: Option<&Bound<'_, PyPolicy>>, model: Option<&str>) -> Option<Arc<ModelSpec>> {
    let policy = policy?;
    model.and_then(|m| policy.get().inner.model(m).cloned())
}

/// The number of tokens of `text` in `encoding` (o200k_base, cl100k_base, p50k_base,
/// p50k_edit, r50k_base); equal to tiktoken's `len(enc.encode_ordinary(text))`.
#[pyfunction]
#[pyo3(signature = (text, encoding = "o200k_base"))]
fn count_tokens(py: Python<'_>, text: &Bound<'_, PyAny>, encoding: &str) -> PyResult<u64> {
    let encoding = Encoding::parse(encoding, "encoding")?;
    let text = str_as_tiktoken_reads(text)?;
    if text.len() > DETACH_BYTES {
        Ok(py.detach(move || encoding.count(&text)))
    } else {
        Ok(encoding.count(&text))
    }
}

/// `text` as a Rust string, read as tiktoken reads it: a str UTF-8 cannot hold (lone
/// surrogates) goes through UTF-16 with replacement, so a lone surrogate becomes U+FFFD and a
/// surrogate pair its character.
fn str_as_tiktoken_reads(text: &Bound<'_, PyAny>) -> PyResult<String> {
    let not_str = || Error::wrong_type("text", text.get_type(), "must be a str");
    let s = text
        .cast::<pyo3::types::PyString>()
        .map_err(|_| not_str())?;
    match s.to_cow() {
        Ok(s) => Ok(s.into_owned()),
        Err(_) => Ok(s
            .call_method1("encode", ("utf-16", "surrogatepass"))?
            .call_method1("decode", ("utf-16", "replace"))?
            .extract()?),
    }
}

/// Counts a request's prompt as `provider` sends it: `{"tokens", "exact", "encoding"}`.
/// `model` may be a list of candidate models (a routing group): the largest count is taken.
#[pyfunction]
#[pyo3(signature = (request, provider = Provider::default(), model = None, *, policy = None), text_signature = "(request, provider='openai', model=None, *, policy=None)")]
fn count_prompt<'py>(
    py: Python<'py>,
    request: &Bound<'py, PyAny>,
    provider: Provider,
    model: Option<&Bound<'py, PyAny>>,
    policy: Option<&Bound<'py, PyPolicy>>,
) -> PyResult<Bound<'py, PyDict>> {
    super::errors::caught("count_prompt", || {
        let api = provider.0;
        let request = py_to_json(request, "request")?;
        let models: Vec<String> = match model.filter(|m| !m.is_none()) {
            None => request
                .get("model")
                .and_then(Value::as_str)
                .map(String::from)
                .into_iter()
                .collect(),
            Some(m) => match m.extract::<String>() {
                Ok(one) => vec![one],
                Err(_) => m.extract::<Vec<String>>().map_err(|_| {
                    let given = m.repr().map(|r| r.to_string()).unwrap_or_default();
                    Error::wrong_type("model", given, "must be a model id or a list of model ids")
                })?,
            },
        };
        let specs: Vec<Option<Arc<ModelSpec>>> =
            models.iter().map(|m| spec_for(policy, Some(m))).collect();
        let count = py.detach(|| {
            if models.len() <= 1 {
                let m = models.first().map(String::as_str);
                ceiling::count_request(&request, api, m, specs.first().and_then(|s| s.as_deref()))
            } else {
                let group: Vec<(&str, Option<&ModelSpec>)> = models
                    .iter()
                    .zip(&specs)
                    .map(|(m, s)| (m.as_str(), s.as_deref()))
                    .collect();
                ceiling::count_request_for_group(&request, api, &group)
            }
        })?;
        let d = PyDict::new(py);
        d.set_item("tokens", count.tokens)?;
        d.set_item("exact", count.exact)?;
        d.set_item("encoding", count.encoding.as_str())?;
        Ok(d)
    })
}

/// A call fitted into a usage ceiling.
#[pyclass(name = "FitResult", module = "usage_guard._core", frozen)]
pub struct PyFitResult {
    pub inner: FitResult,
    pub api: Api,
}

#[pymethods]
impl PyFitResult {
    /// The request to send (a new dict on every access).
    #[getter]
    fn request<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_to_py(py, &self.inner.request)
    }
    /// The prompt's tokens as counted (without margin).
    #[getter]
    fn prompt_tokens(&self) -> u64 {
        self.inner.prompt_tokens
    }
    /// Whether `prompt_tokens` is exact.
    #[getter]
    fn prompt_exact(&self) -> bool {
        self.inner.prompt_exact
    }
    /// The output maximum set in the request (None for embeddings).
    #[getter]
    fn max_output_tokens(&self) -> Option<u64> {
        self.inner.max_output_tokens
    }
    /// The thinking budget in force (None when none is set or thinking was turned off).
    #[getter]
    fn thinking_budget(&self) -> Option<u64> {
        self.inner.thinking_budget
    }
    /// True when the ceiling turned thinking off.
    #[getter]
    fn thinking_disabled(&self) -> bool {
        self.inner.thinking_disabled
    }
    /// True when the output maximum in force is the ceiling's.
    #[getter]
    fn output_capped(&self) -> bool {
        self.inner.output_capped
    }
    /// True when the ceiling lowered anything.
    #[getter]
    fn lowered(&self) -> bool {
        self.inner.lowered
    }
    /// The API word the request was fitted for.
    #[getter]
    fn provider(&self) -> &'static str {
        self.api.as_str()
    }
    fn __repr__(&self) -> String {
        let opt = |v: Option<u64>| v.map_or("None".to_string(), |n| n.to_string());
        let flag = |b: bool| if b { "True" } else { "False" };
        format!(
            "FitResult(provider={:?}, prompt_tokens={}, prompt_exact={}, max_output_tokens={}, \
             thinking_budget={}, thinking_disabled={}, lowered={})",
            self.api.as_str(),
            self.inner.prompt_tokens,
            flag(self.inner.prompt_exact),
            opt(self.inner.max_output_tokens),
            opt(self.inner.thinking_budget),
            flag(self.inner.thinking_disabled),
            flag(self.inner.lowered)
        )
    }
}

/// Fits `request` into `ceiling` (a ticket's `.ceiling` dict); raises `UsageLimitDoesNotFit`
/// or `ContextWindowExceeded` before any provider sees a call that cannot fit.
#[pyfunction]
#[pyo3(signature = (request, ceiling, provider = Provider::default(), model = None, *, policy = None, require_full_output = false), text_signature = "(request, ceiling, provider='openai', model=None, *, policy=None, require_full_output=False)")]
fn fit(
    py: Python<'_>,
    request: &Bound<'_, PyAny>,
    ceiling: &Bound<'_, PyAny>,
    provider: Provider,
    model: Option<String>,
    policy: Option<&Bound<'_, PyPolicy>>,
    require_full_output: bool,
) -> PyResult<PyFitResult> {
    super::errors::caught("fit", || {
        let api = provider.0;
        let ceiling = ceiling_from_py(ceiling)?;
        let request = py_to_json(request, "request")?;
        let model = model.or_else(|| {
            request
                .get("model")
                .and_then(Value::as_str)
                .map(String::from)
        });
        let spec = spec_for(policy, model.as_deref());
        let options = FitOptions {
            require_full_output,
            default_max_output_tokens: policy
                .map(|p| p.get().inner.settings.default_max_output_tokens),
        };
        let inner = py.detach(|| {
            ceiling::fit(
                &request,
                &ceiling,
                api,
                model.as_deref(),
                spec.as_deref(),
                &options,
            )
        })?;
        Ok(PyFitResult { inner, api })
    })
}

/// Whether `response` stopped at an output maximum the ceiling set in `fit_result`.
#[pyfunction]
#[pyo3(signature = (response, fit_result, provider = None))]
fn usage_capped(
    response: &Bound<'_, PyAny>,
    fit_result: &Bound<'_, PyFitResult>,
    provider: Option<Provider>,
) -> PyResult<bool> {
    super::errors::caught("usage_capped", || {
        let fitted = fit_result.get();
        let api = provider.map_or(fitted.api, |p| p.0);
        let response = py_to_json(response, "response")?;
        Ok(ceiling::usage_capped(&response, &fitted.inner, api))
    })
}

/// The lesser of two ceiling dicts (a router's and the routed model's).
#[pyfunction]
fn intersect_ceilings<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyDict>> {
    let c = ceiling_from_py(a)?.intersect(&ceiling_from_py(b)?);
    ceiling_to_py(py, &c)
}

/// How many prompts the core has counted in this process (every count, in admission, `fit`
/// or `count_prompt`). A diagnostic, to check a call counts its prompt once; never reset.
#[pyfunction]
fn _prompt_counts() -> u64 {
    ceiling::prompt_counts()
}

/// Adds the ceiling functions and `FitResult` to `_core`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyFitResult>()?;
    m.add_function(wrap_pyfunction!(count_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(count_prompt, m)?)?;
    m.add_function(wrap_pyfunction!(fit, m)?)?;
    m.add_function(wrap_pyfunction!(usage_capped, m)?)?;
    m.add_function(wrap_pyfunction!(intersect_ceilings, m)?)?;
    m.add_function(wrap_pyfunction!(_prompt_counts, m)?)?;
    Ok(())
}
