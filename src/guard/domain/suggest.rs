//! "Did you mean": the word of a closed vocabulary nearest to one that is not in it, for every
//! error of the policy parser that lists accepted words (keys, metrics, windows, providers,
//! actions, settings, attributes, model and team ids).

/// Words people write for a vocabulary word that spelling distance would not find.
const SYNONYMS: &[(&str, &str)] = &[
    ("daily", "day"),
    ("per day", "day"),
    ("weekly", "week"),
    ("monthly", "month"),
    ("yearly", "year"),
    ("annual", "year"),
    ("annually", "year"),
    ("hourly", "hour"),
    ("secondly", "second"),
    ("minutely", "minute"),
    ("cost_usd", "cost"),
    ("dollars", "cost"),
    ("spend", "cost"),
    ("request", "requests"),
    ("calls", "requests"),
];

/// The nearest word of `accepted` to `word`: the same word in another letter case or with
/// spaces around it, a synonym (`daily` → `day`), else the closest within an edit distance
/// (insertions, deletions, substitutions, swaps of two neighbours) of 1 for words of up to 4
/// letters and 2 past that. `None` when nothing is that close: a wild guess helps no one.
pub(crate) fn nearest<'a>(word: &str, accepted: &[&'a str]) -> Option<&'a str> {
    nearest_within(word, accepted, 2)
}

/// [`nearest`] with at most `most` edits, whatever the word's length: for ids, where a near
/// name is often another thing (`gpt-5` and `gpt-4o` are two edits apart).
pub(crate) fn nearest_within<'a>(word: &str, accepted: &[&'a str], most: usize) -> Option<&'a str> {
    let word = word.trim().to_lowercase();
    if word.is_empty() {
        return None;
    }
    if let Some(same) = accepted.iter().find(|a| a.to_lowercase() == word) {
        return Some(same);
    }
    if let Some((_, to)) = SYNONYMS.iter().find(|(from, _)| *from == word) {
        if let Some(found) = accepted.iter().find(|a| *a == to) {
            return Some(found);
        }
    }
    let budget = if word.chars().count() <= 4 { 1 } else { 2 }.min(most);
    accepted
        .iter()
        .map(|a| (distance(&word, &a.to_lowercase()), *a))
        .filter(|(d, _)| *d <= budget)
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

/// ` (did you mean "x"?)` for the nearest word of `accepted`, or nothing.
pub(crate) fn hint(word: &str, accepted: &[&str]) -> String {
    nearest(word, accepted)
        .map(|found| format!(" (did you mean \"{found}\"?)"))
        .unwrap_or_default()
}

/// The edit distance of `a` and `b` (optimal string alignment: a swap of two neighbouring
/// letters is one edit, as `modle` → `model`), on characters.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows of the table are enough: the swap looks two rows back.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut last: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (last[j] + 1).min(row[j - 1] + 1).min(last[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            row[j] = best;
        }
        before = std::mem::replace(&mut last, row);
    }
    last[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(distance("modle", "model"), 1);
        assert_eq!(distance("setting", "settings"), 1);
        assert_eq!(distance("token", "tokens"), 1);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("abc", "abc"), 0);
    }

    #[test]
    fn the_issues_examples_get_their_word() {
        let top = ["models", "teams", "limits", "settings", "rules"];
        assert_eq!(nearest("setting", &top), Some("settings"));
        let metrics = ["tokens", "input_tokens", "cost", "requests"];
        assert_eq!(nearest("token", &metrics), Some("tokens"));
        let windows = ["minute", "hour", "day", "week", "month", "year"];
        assert_eq!(nearest("daily", &windows), Some("day"));
        assert_eq!(nearest("Day", &windows), Some("day"));
        assert_eq!(nearest(" weekly ", &windows), Some("week"));
        let keys = ["user", "model", "rules"];
        assert_eq!(nearest("modle", &keys), Some("model"));
    }

    #[test]
    fn far_words_get_no_guess() {
        let windows = ["minute", "hour", "day", "week", "month", "year"];
        assert_eq!(nearest("fortnight", &windows), None);
        assert_eq!(nearest("", &windows), None);
        // Short words allow one edit only: "dax" is near "day", "dxx" is not.
        assert_eq!(nearest("dax", &windows), Some("day"));
        assert_eq!(nearest("dxx", &windows), None);
        assert_eq!(hint("fortnight", &windows), "");
        assert_eq!(hint("hours", &windows), " (did you mean \"hour\"?)");
    }
}
