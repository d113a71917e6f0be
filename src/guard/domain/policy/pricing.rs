//! What a model's calls cost: its rates, a higher rate past a prompt size (long-context
//! tiers), reasoning billed apart, and where the price came from. Integers throughout:
//! micro-dollars per million tokens, so a call's cost is exact to the micro-dollar.

use serde_json::Value;

use super::values::{key_path, Parser};

/// Prices in micro-dollars per million tokens (= pico-dollars a token), so that
/// `tokens × price / 1_000_000` is micro-dollars, exact in integers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prices {
    pub input: u64,
    pub cached_input: u64,
    pub output: u64,
}

impl Prices {
    /// The cost of a call in micro-dollars, rounded up to the next micro-dollar.
    /// `input_tokens` includes `cached_input_tokens`.
    pub fn cost_micros(
        &self,
        input_tokens: u64,
        cached_input_tokens: u64,
        output_tokens: u64,
    ) -> u64 {
        let cached = cached_input_tokens.min(input_tokens);
        let pico = (input_tokens - cached) as u128 * self.input as u128
            + cached as u128 * self.cached_input as u128
            + output_tokens as u128 * self.output as u128;
        pico.div_ceil(1_000_000).min(u64::MAX as u128) as u64
    }

    /// The most a call of this size can cost: input at the dearest input rate.
    pub fn dearest_cost_micros(&self, input_tokens: u64, output_tokens: u64) -> u64 {
        let input_rate = self.input.max(self.cached_input) as u128;
        let pico = input_tokens as u128 * input_rate + output_tokens as u128 * self.output as u128;
        pico.div_ceil(1_000_000).min(u64::MAX as u128) as u64
    }
}

/// A higher rate for the whole call when its prompt is over `above_input_tokens`, as Gemini
/// 2.5 Pro and Claude Sonnet's long context bill: every token of such a call, input and
/// output, is billed at `prices`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongContext {
    pub above_input_tokens: u64,
    pub prices: Prices,
}

/// Where a model's price comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PriceOrigin {
    /// Nowhere: its calls cost 0, and the policy refuses a cost rule over it.
    #[default]
    None,
    /// The model's `prices` in the policy.
    Policy,
    /// `settings.prices_file`.
    File,
    /// The built-in price table.
    Table,
}

/// A model's prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pricing {
    /// The rates of a call whose prompt is within every tier.
    pub base: Prices,
    pub long_context: Option<LongContext>,
    /// Reasoning tokens' rate when it is not the output rate (they are part of the output
    /// tokens, as the providers report them).
    pub reasoning: Option<u64>,
    pub origin: PriceOrigin,
}

impl Pricing {
    /// Whether the model has a price from anywhere (a price of 0 written is a price).
    pub fn is_priced(&self) -> bool {
        self.origin != PriceOrigin::None
    }

    /// The rates of a call with `input_tokens` of prompt: the tier the prompt is in.
    fn tier(&self, input_tokens: u64) -> Prices {
        match self.long_context {
            Some(l) if input_tokens > l.above_input_tokens => l.prices,
            _ => self.base,
        }
    }

    /// The rates to reserve and fit a call with `input_tokens` of (held) prompt: its tier,
    /// output at the dearer of the output and reasoning rates (a reservation cannot know how
    /// much of the output will be reasoning).
    pub fn rates(&self, input_tokens: u64) -> Prices {
        let mut rates = self.tier(input_tokens);
        if let Some(r) = self.reasoning {
            rates.output = rates.output.max(r);
        }
        rates
    }

    /// The cost of a call in micro-dollars, rounded up: `input_tokens` includes
    /// `cached_input_tokens`, `output_tokens` includes `reasoning_tokens`; the tier is the
    /// prompt's (`input_tokens`).
    pub fn cost_micros(
        &self,
        input_tokens: u64,
        cached_input_tokens: u64,
        output_tokens: u64,
        reasoning_tokens: u64,
    ) -> u64 {
        let rates = self.tier(input_tokens);
        let Some(reasoning_rate) = self.reasoning else {
            return rates.cost_micros(input_tokens, cached_input_tokens, output_tokens);
        };
        let cached = cached_input_tokens.min(input_tokens);
        let reasoning = reasoning_tokens.min(output_tokens);
        let pico = (input_tokens - cached) as u128 * rates.input as u128
            + cached as u128 * rates.cached_input as u128
            + (output_tokens - reasoning) as u128 * rates.output as u128
            + reasoning as u128 * reasoning_rate as u128;
        pico.div_ceil(1_000_000).min(u64::MAX as u128) as u64
    }
}

/// The keys of a price table (`prices = {...}` of a model, an entry of a prices file).
pub(super) const PRICE_KEYS: [&str; 5] = [
    "input",
    "cached_input",
    "output",
    "reasoning",
    "long_context",
];
const TIER_KEYS: [&str; 4] = ["above_input_tokens", "input", "cached_input", "output"];

impl Parser {
    /// A `prices` table: `input`, `cached_input` (default `input`), `output` in dollars per
    /// million tokens, `reasoning` (default: the output rate), `long_context`. `extra` keys
    /// are the caller's (a prices file's `source`, `as_of`...), read elsewhere.
    pub(super) fn pricing(
        &mut self,
        path: &str,
        value: &Value,
        extra: &[&str],
        origin: PriceOrigin,
    ) -> Pricing {
        let accepted: Vec<&str> = PRICE_KEYS.iter().chain(extra).copied().collect();
        let Some(fields) = self.table(path, value, &accepted) else {
            return Pricing::default();
        };
        // Both rates must be written (0 for free): a rate left out would price that side
        // of every call at 0, and a cost rule over the model would count nothing for it.
        for key in ["input", "output"] {
            self.required(path, fields, key);
        }
        let base = self.rates_of(path, fields);
        let reasoning = fields
            .get("reasoning")
            .and_then(|v| self.dollars(&key_path(path, "reasoning"), v, PER_MILLION));
        let long_context = fields.get("long_context").and_then(|v| {
            let tier_path = key_path(path, "long_context");
            let tier = self.table(&tier_path, v, &TIER_KEYS)?;
            let above = self
                .required(&tier_path, tier, "above_input_tokens")
                .and_then(|a| self.whole(&key_path(&tier_path, "above_input_tokens"), a, 1));
            for key in ["input", "output"] {
                self.required(&tier_path, tier, key);
            }
            let prices = self.rates_of(&tier_path, tier);
            Some(LongContext {
                above_input_tokens: above?,
                prices,
            })
        });
        Pricing {
            base,
            long_context,
            reasoning,
            origin,
        }
    }

    fn rates_of(&mut self, path: &str, fields: &serde_json::Map<String, Value>) -> Prices {
        let mut get = |key: &str| {
            fields
                .get(key)
                .and_then(|v| self.dollars(&key_path(path, key), v, PER_MILLION))
        };
        let input = get("input").unwrap_or(0);
        let output = get("output").unwrap_or(0);
        let cached_input = get("cached_input").unwrap_or(input);
        Prices {
            input,
            cached_input,
            output,
        }
    }
}

const PER_MILLION: &str = "dollars per million tokens";

#[cfg(test)]
mod tests {
    use super::*;

    fn gemini_pro() -> Pricing {
        let base = Prices {
            input: 1_250_000,
            cached_input: 125_000,
            output: 10_000_000,
        };
        let long = Prices {
            input: 2_500_000,
            cached_input: 250_000,
            output: 15_000_000,
        };
        Pricing {
            base,
            long_context: Some(LongContext {
                above_input_tokens: 200_000,
                prices: long,
            }),
            reasoning: None,
            origin: PriceOrigin::Table,
        }
    }

    #[test]
    fn the_tier_edge_is_the_prompt_size() {
        let p = gemini_pro();
        // 200,000 prompt tokens is within the base tier: $0.25 + 1,000 out at $10/M.
        assert_eq!(p.cost_micros(200_000, 0, 1_000, 0), 250_000 + 10_000);
        // One token more and the whole call is at the long rate, output too.
        assert_eq!(p.cost_micros(200_001, 0, 1_000, 0), 500_003 + 15_000);
        assert_eq!(p.rates(200_000).output, 10_000_000);
        assert_eq!(p.rates(200_001).output, 15_000_000);
        // Cached tokens count toward the prompt size and take the tier's cached rate.
        assert_eq!(p.cost_micros(300_000, 100_000, 0, 0), 500_000 + 25_000);
    }

    #[test]
    fn reasoning_billed_apart_when_priced_apart() {
        let p = Pricing {
            reasoning: Some(3_500_000),
            ..Pricing {
                base: Prices {
                    input: 0,
                    cached_input: 0,
                    output: 600_000,
                },
                ..Pricing::default()
            }
        };
        // 1,000 output tokens of which 400 are reasoning: 600 × $0.60/M + 400 × $3.50/M.
        assert_eq!(p.cost_micros(0, 0, 1_000, 400), 360 + 1_400);
        // More reasoning than output is clamped to the output.
        assert_eq!(p.cost_micros(0, 0, 100, 400), 350);
        assert_eq!(p.rates(0).output, 3_500_000);
    }
}
