//! Admission of a single call: resolve → count → read → decide → fit → reserve, through the
//! one admission loop (`reserve/reserve_loop.rs`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::ceiling::{self, Api, FitOptions, PromptCount};
use crate::error::{Error, Result};
use crate::guard::domain::clock::Millis;
use crate::guard::domain::decide::{Demand, Plan, UsageCeiling};
use crate::guard::domain::path::Path;
use crate::guard::domain::policy::{Settings, UncappedOutput, MAX_AMOUNT};
use crate::guard::domain::refusal::Refusal;
use crate::guard::engine::handle::Guard;
use crate::guard::engine::reserve::reserve_loop::ReserveEnd;
use crate::guard::engine::settle::admitted_request::AdmittedRequest;
use crate::guard::engine::settle::ticket::{ReservedParts, Ticket, TicketParts};
use crate::guard::engine::shared::Resolved;
use crate::guard::store::StoreError;

pub(crate) use crate::guard::engine::settle::settling::CALL_HOLD_MS;

/// What the caller knows about a call before it runs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdmitRequest {
    /// The person calling; `None` for a call with no user (`settings.anonymous` says what
    /// it may do: no limits by default).
    pub user: Option<String>,
    pub model: String,
    /// The prompt's tokens, if counted.
    pub prompt_tokens: Option<u64>,
    /// Whether `prompt_tokens` is an estimate rather than an exact count.
    pub prompt_is_estimate: bool,
    /// The caller's output maximum (`max_tokens`).
    pub max_output_tokens: Option<u64>,
    /// The provider request as it will be sent, and its API shape. The guard counts its
    /// prompt (when `prompt_tokens` is not given), reads its output maximum (when
    /// `max_output_tokens` is not given), and fits it into the ceiling: the ticket then
    /// carries the changes to send.
    pub request: Option<(serde_json::Value, Api)>,
    /// The call's attributes for generic rules (`credential`, `session`, ...; not `model`).
    pub attributes: Vec<(String, String)>,
}

impl Guard {
    /// Admits a call: resolves the path, reads its counters, decides, fits the request (when
    /// given) into what is left, and reserves all or none. Refusals are `Error::Refused`;
    /// a request that cannot fit is refused before anything is reserved.
    pub(crate) async fn admit_one(&self, request: AdmitRequest) -> Result<Ticket> {
        check_names(&request)?;
        // One reading of the clock for the path cache and the ticket's admission time.
        let admitted_at = self.shared.clock.now_ms();
        let (user, attributes) = (request.user.as_deref(), &request.attributes[..]);
        let Resolved { path, policy } =
            self.shared
                .resolve_at(user, &request.model, attributes, admitted_at)?;
        let settings = &policy.settings;
        let (request, prompt) = counted(request, &path).await?;
        // Context first, for everyone: a prompt the model cannot take is a 400 that no usage
        // limit (and no waiting) changes.
        check_context(&request, &path).map_err(|e| self.count_refusal(e))?;
        let demand = demand(&path, &request, settings);
        let fit = |ceiling: &UsageCeiling| fit_request(&request, &path, settings, prompt, ceiling);
        let id = self.shared.ticket_id();
        let ticket = |reserved, ceiling, fitted, uncounted| {
            self.ticket(
                id.clone(),
                &path,
                reserved,
                ceiling,
                admitted_at,
                fitted,
                uncounted,
            )
        };
        if path.is_unlimited() {
            let ceiling = unlimited_ceiling(&demand, settings);
            let fitted = fit(&ceiling).map_err(|e| self.count_refusal(e))?;
            self.shared.stats.admitted.fetch_add(1, Relaxed);
            return Ok(ticket(None, ceiling, fitted, false));
        }
        let end = self
            .reserve_loop(&id, &path, &demand, settings, CALL_HOLD_MS, |plan, _, _| {
                fit(&plan.ceiling)
            })
            .await?;
        match end {
            ReserveEnd::Placed(done) => {
                let ceiling = done.plan.ceiling.clone();
                Ok(ticket(
                    Some((&done.plan, done.minute)),
                    ceiling,
                    done.extra,
                    false,
                ))
            }
            ReserveEnd::StoreFailed(error) if self.ledger_answers(&path, settings) => {
                self.shared.stats.store_errors.fetch_add(1, Relaxed);
                self.shared
                    .store
                    .as_ref()
                    .outage()
                    .log_failed("admit", &error);
                let plan = self.decide_from_ledger(&path, &demand, settings).await?;
                let fitted = fit(&plan.ceiling).map_err(|e| self.count_refusal(e))?;
                self.shared.stats.admitted.fetch_add(1, Relaxed);
                Ok(self.unheld_ticket(id.clone(), &path, &plan, admitted_at, fitted))
            }
            ReserveEnd::StoreFailed(error) => {
                self.store_failed(&path, settings, &error)?;
                let ceiling = unlimited_ceiling(&demand, settings);
                let fitted = fit(&ceiling).map_err(|e| self.count_refusal(e))?;
                self.shared.stats.uncounted.fetch_add(1, Relaxed);
                self.shared.stats.admitted.fetch_add(1, Relaxed);
                Ok(ticket(None, ceiling, fitted, true))
            }
        }
    }

    pub(crate) fn refuse(&self, refusal: Refusal) -> Error {
        self.shared.stats.refused.fetch_add(1, Relaxed);
        Error::Refused(Box::new(refusal))
    }

    /// Counts a refusal made outside `decide` (a request that cannot fit); other errors pass.
    pub(crate) fn count_refusal(&self, error: Error) -> Error {
        if matches!(error, Error::Refused(_)) {
            self.shared.stats.refused.fetch_add(1, Relaxed);
        }
        error
    }

    /// The store failed: refuses as unavailable when a rule could refuse the call; else the
    /// call may run uncounted (`Ok`).
    fn store_failed(&self, path: &Path, settings: &Settings, error: &StoreError) -> Result<()> {
        self.shared.stats.store_errors.fetch_add(1, Relaxed);
        self.shared
            .store
            .as_ref()
            .outage()
            .log_failed("admit", error);
        let could_refuse = path
            .ceilings
            .iter()
            .chain(path.sources.iter().flat_map(|s| s.rules.iter()))
            .any(|r| !settings.fail_open.contains(&r.rule.metric));
        if could_refuse {
            self.shared.stats.unavailable.fetch_add(1, Relaxed);
            self.shared.stats.refused.fetch_add(1, Relaxed);
            return Err(Error::Refused(Box::new(Refusal::unavailable())));
        }
        Ok(())
    }

    /// Ticket `id` for an admitted call; `reserved` is the plan and expiry minute of its
    /// holds (none for a call admitted without counting).
    #[allow(clippy::too_many_arguments)]
    fn ticket(
        &self,
        id: String,
        path: &Arc<Path>,
        reserved: Option<(&Plan, i64)>,
        ceiling: UsageCeiling,
        admitted_at: Millis,
        request: Option<Box<AdmittedRequest>>,
        uncounted: bool,
    ) -> Ticket {
        let parts = ReservedParts::of(path, reserved);
        Ticket::new(TicketParts {
            id,
            shared: self.shared.clone(),
            path: path.clone(),
            source: parts.source,
            ceiling,
            holds: parts.holds,
            expiry_minute: parts.expiry_minute,
            adds: parts.adds,
            admitted_at,
            uncounted,
            request,
            warnings: parts.warnings,
        })
    }
}

fn check_names(request: &AdmitRequest) -> Result<()> {
    if request.user.as_deref() == Some("") {
        return Err(Error::invalid(
            "user",
            "\"\"",
            "must not be empty; pass None for a call without a user",
        ));
    }
    if request.model.is_empty() {
        return Err(Error::invalid("model", "\"\"", "must not be empty"));
    }
    Ok(())
}

/// What a call may use at most: its prompt and, for each answer it asks for, its output
/// maximum (the caller's, capped by the model's; else what `settings.uncapped_output`
/// reserves: the model's, else the policy's default, or the setting's number), clamped so
/// amounts stay exact in every store (Redis computes in doubles) and never overflow.
pub(crate) fn demand(path: &Path, request: &AdmitRequest, settings: &Settings) -> Demand {
    let model_max = path.model_spec.as_ref().and_then(|m| m.max_output_tokens);
    let uncapped = request.max_output_tokens.is_none();
    let max_output_tokens = match (request.max_output_tokens, model_max) {
        (Some(caller), Some(model)) => caller.min(model),
        (Some(caller), None) => caller,
        (None, model) => match settings.uncapped_output {
            UncappedOutput::Tokens(n) => model.map_or(n, |m| m.min(n)),
            UncappedOutput::Model | UncappedOutput::Share(_) => {
                model.unwrap_or(settings.default_max_output_tokens)
            }
        },
    };
    // An invalid `n` is refused by the fit, naming the field; here it counts as one answer.
    let answers = match &request.request {
        Some((body, api)) => ceiling::answers(body, *api).unwrap_or(1),
        None => 1,
    };
    Demand {
        prompt_tokens: request.prompt_tokens.unwrap_or(0).min(MAX_AMOUNT),
        prompt_is_estimate: request.prompt_is_estimate,
        max_output_tokens: max_output_tokens.min(MAX_AMOUNT),
        answers: answers.clamp(1, MAX_AMOUNT),
        uncapped,
    }
}

/// Prompts whose text is longer than this are counted off the caller's event loop.
const OFFLOAD_TEXT_BYTES: usize = 64 * 1024;

/// Fills in the prompt count and output maximum from the provider request, when given; the
/// count (made once, with the policy's model spec) is kept for the fit and the ticket. A
/// long prompt is counted on the runtime's blocking pool (`runtime::offload`): a gateway's
/// serving thread, or the shared runtime of `admit_async`, serves other calls meanwhile.
async fn counted(
    mut request: AdmitRequest,
    path: &Arc<Path>,
) -> Result<(AdmitRequest, Option<PromptCount>)> {
    let Some((body, api)) = request.request.take() else {
        return Ok((request, None));
    };
    ceiling::check_bounded(&body, api)?;
    let mut prompt = None;
    let body = if request.prompt_tokens.is_some() {
        body
    } else {
        let count = move |body: &serde_json::Value, path: &Path| {
            let spec = path.model_spec.as_deref();
            ceiling::count_request(body, api, Some(&path.model), spec)
        };
        let (body, count) = if text_longer_than(&body, OFFLOAD_TEXT_BYTES) {
            let path = path.clone();
            crate::runtime::offload(move || {
                let counted = count(&body, &path);
                (body, counted)
            })
            .await
        } else {
            let counted = count(&body, path);
            (body, counted)
        };
        let count = count?;
        request.prompt_tokens = Some(count.tokens);
        request.prompt_is_estimate = !count.exact;
        prompt = Some(count);
        body
    };
    if request.max_output_tokens.is_none() {
        request.max_output_tokens = if api.is_embeddings() {
            Some(0)
        } else {
            ceiling::requested_max_output(&body, api)?
        };
    }
    request.request = Some((body, api));
    Ok((request, prompt))
}

/// Whether the strings in `value` (keys and values) are longer than `limit` bytes together.
fn text_longer_than(value: &serde_json::Value, limit: usize) -> bool {
    fn walk(value: &serde_json::Value, left: &mut usize) -> bool {
        match value {
            serde_json::Value::String(s) => {
                *left = left.saturating_sub(s.len());
                *left == 0
            }
            serde_json::Value::Array(items) => items.iter().any(|v| walk(v, left)),
            serde_json::Value::Object(map) => map.iter().any(|(k, v)| {
                *left = left.saturating_sub(k.len());
                *left == 0 || walk(v, left)
            }),
            _ => false,
        }
    }
    let mut left = limit + 1;
    walk(value, &mut left)
}

/// Refuses a prompt over the model's context window or input limit (the policy's model
/// entry, else the registry), before any usage limit is read.
fn check_context(request: &AdmitRequest, path: &Path) -> Result<()> {
    let Some(prompt) = request.prompt_tokens else {
        return Ok(());
    };
    let (api, embeddings) = match &request.request {
        Some((_, api)) => (*api, api.is_embeddings()),
        // Without a request, a call that asks for no output may fill the window.
        None => (Api::OpenAiChat, request.max_output_tokens == Some(0)),
    };
    let spec = path.model_spec.as_deref();
    ceiling::check_context(prompt, api, Some(&path.model), spec, embeddings)
}

/// Fits the provider request (when the caller gave one) into `ceiling`, with the policy's
/// model spec.
fn fit_request(
    request: &AdmitRequest,
    path: &Path,
    settings: &Settings,
    prompt: Option<PromptCount>,
    ceiling: &UsageCeiling,
) -> Result<Option<Box<AdmittedRequest>>> {
    let Some((body, api)) = request.request.as_ref() else {
        return Ok(None);
    };
    let spec = path.model_spec.as_deref();
    let options = &FitOptions {
        require_full_output: false,
        default_max_output_tokens: Some(settings.default_max_output_tokens),
    };
    let model = Some(&*path.model);
    let fit = match &prompt {
        Some(count) => ceiling::fit_counted(body, ceiling, *api, model, spec, count, options)?,
        None => ceiling::fit(body, ceiling, *api, model, spec, options)?,
    };
    Ok(Some(Box::new(AdmittedRequest {
        api: *api,
        prompt,
        fit,
    })))
}

fn unlimited_ceiling(demand: &Demand, settings: &Settings) -> UsageCeiling {
    UsageCeiling {
        tokens: None,
        cost_micros: None,
        rates: None,
        max_output_tokens: demand.max_output_tokens,
        min_output_tokens: settings.min_output_tokens,
        margin: settings.margin,
    }
}
