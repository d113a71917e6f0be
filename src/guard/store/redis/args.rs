//! The keys or the arguments of one script call, written into one buffer: an allocation or
//! two per call rather than one per key and argument (a carried admission sends ~130).

/// Texts written one after another into one `String`, each ending where `ends` says.
#[derive(Debug, Default, Clone)]
pub(super) struct Args {
    data: String,
    ends: Vec<usize>,
}

impl Args {
    /// Room for `items` texts of about `bytes` in all.
    pub(super) fn with_capacity(items: usize, bytes: usize) -> Self {
        Args {
            data: String::with_capacity(bytes),
            ends: Vec::with_capacity(items),
        }
    }

    /// The items `texts`, in order.
    pub(super) fn of<S: AsRef<str>>(texts: impl IntoIterator<Item = S>) -> Self {
        let mut args = Args::default();
        for text in texts {
            args.push(text.as_ref());
        }
        args
    }

    /// Appends `text` as one item.
    pub(super) fn push(&mut self, text: &str) {
        self.data.push_str(text);
        self.ends.push(self.data.len());
    }

    /// Appends a whole number as one item, in decimal.
    pub(super) fn push_num(&mut self, n: impl itoa::Integer) {
        self.data.push_str(itoa::Buffer::new().format(n));
        self.ends.push(self.data.len());
    }

    /// Appends one item that `write` writes in place (a key rendered without a `String` of
    /// its own).
    pub(super) fn push_with(&mut self, write: impl FnOnce(&mut String)) {
        write(&mut self.data);
        self.ends.push(self.data.len());
    }

    /// How many items.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// How many bytes the items hold in all.
    pub(super) fn bytes(&self) -> usize {
        self.data.len()
    }

    /// The `i`-th item.
    pub(super) fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.data[start..self.ends[i]]
    }

    /// Every item in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Removes the last item and returns it.
    pub(super) fn pop(&mut self) -> Option<String> {
        let last = self.ends.pop()?;
        let start = self.ends.last().copied().unwrap_or(0);
        let text = self.data[start..last].to_string();
        self.data.truncate(start);
        Some(text)
    }

    /// Appends the first `count` items of `other`.
    pub(super) fn extend_from(&mut self, other: &Args, count: usize) {
        let offset = self.data.len();
        let end = if count == 0 { 0 } else { other.ends[count - 1] };
        self.data.push_str(&other.data[..end]);
        self.ends
            .extend(other.ends[..count].iter().map(|e| e + offset));
    }
}

#[cfg(test)]
mod tests {
    use super::Args;

    #[test]
    fn items_keep_their_bounds_through_pop_and_extend() {
        let mut a = Args::default();
        a.push("ab");
        a.push_num(-42);
        a.push("");
        a.push_with(|s| s.push_str("x:y"));
        assert_eq!(a.iter().collect::<Vec<_>>(), ["ab", "-42", "", "x:y"]);
        assert_eq!(a.pop().as_deref(), Some("x:y"));
        assert_eq!(a.pop().as_deref(), Some(""));
        let mut b = Args::with_capacity(4, 16);
        b.push("z");
        b.extend_from(&a, 2);
        b.extend_from(&a, 0);
        assert_eq!(b.iter().collect::<Vec<_>>(), ["z", "ab", "-42"]);
        assert_eq!(b.len(), 3);
        assert_eq!(Args::default().pop(), None);
    }
}
