//! The room arithmetic admission and fit share: the margin an estimated prompt keeps free,
//! and the output a cost budget leaves room for. Pure; both sides must agree to the token.

use super::policy::Prices;

/// The prompt tokens to hold and fit with: `prompt`, plus `margin` of it (rounded up) when
/// the count is an estimate. Never overflows (saturates).
pub(crate) fn with_margin(prompt: u64, estimate: bool, margin: f64) -> u64 {
    if !estimate {
        return prompt;
    }
    prompt.saturating_add((prompt as f64 * margin).ceil() as u64)
}

/// The output tokens `cost_left` micro-dollars pay for once `prompt_cost` is spent, at
/// `prices.output` (micro-dollars per million tokens); `None` when output is free (no bound).
/// Rounds down, so the output it allows never costs more than is left.
pub(crate) fn cost_output_room(cost_left: u64, prompt_cost: u64, prices: &Prices) -> Option<u64> {
    if prices.output == 0 {
        return None;
    }
    let left = cost_left.saturating_sub(prompt_cost) as u128;
    Some((left * 1_000_000 / prices.output as u128).min(u64::MAX as u128) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_only_for_estimates() {
        assert_eq!(with_margin(100, false, 0.05), 100);
        assert_eq!(with_margin(100, true, 0.05), 105);
        assert_eq!(with_margin(101, true, 0.05), 107);
        assert_eq!(with_margin(u64::MAX, true, 0.5), u64::MAX);
    }

    #[test]
    fn cost_room_rounds_down_and_free_output_is_unbounded() {
        let p = Prices {
            input: 1_000_000,
            cached_input: 1_000_000,
            output: 3_000_000,
        };
        assert_eq!(cost_output_room(10, 0, &p), Some(3));
        assert_eq!(cost_output_room(10, 11, &p), Some(0));
        let free = Prices { output: 0, ..p };
        assert_eq!(cost_output_room(10, 0, &free), None);
    }
}
