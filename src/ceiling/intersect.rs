//! Router ceilings: a router passes its ceiling on, and the routed model's call fits in both.

use crate::guard::domain::decide::UsageCeiling;
use crate::guard::domain::policy::Prices;

impl UsageCeiling {
    /// The lesser of two ceilings: a call fitted into the result fits into both.
    ///
    /// Tokens, cost and the output maximum take the smaller (an absent limit is no limit);
    /// rates take the dearer of each price, so a cost within `cost_micros` at the result's
    /// rates is within each ceiling's own; `min_output_tokens` and `margin` take the larger
    /// (the stricter refusal and the safer estimate).
    pub fn intersect(&self, other: &UsageCeiling) -> UsageCeiling {
        fn least(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        let rates = match (self.rates, other.rates) {
            (Some(a), Some(b)) => Some(Prices {
                input: a.input.max(b.input),
                cached_input: a.cached_input.max(b.cached_input),
                output: a.output.max(b.output),
            }),
            (a, b) => a.or(b),
        };
        UsageCeiling {
            tokens: least(self.tokens, other.tokens),
            cost_micros: least(self.cost_micros, other.cost_micros),
            rates,
            max_output_tokens: self.max_output_tokens.min(other.max_output_tokens),
            min_output_tokens: self.min_output_tokens.max(other.min_output_tokens),
            margin: self.margin.max(other.margin),
        }
    }
}
