//! Cutting a streamed answer into events, in time linear in its bytes: each byte is looked
//! at once (a chunk's new bytes are scanned from where the last scan stopped, never the
//! whole buffer again), and a partial event is moved to the buffer's front at most once.
//! One event is bounded (`gateway.max_event_bytes`): a stream whose event grows past it
//! (an NDJSON line that never ends, say) is cut there.

use super::shape::Framing;

/// Events out of a stream's chunks.
pub(crate) struct Framer {
    framing: Framing,
    buffer: Vec<u8>,
    /// Where the next event begins.
    start: usize,
    /// How far the search for the next event's end got.
    scanned: usize,
    max_event: usize,
    /// Bytes looked at, for the test of linearity.
    #[cfg(test)]
    looked: usize,
}

/// An event larger than the bound.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TooLarge;

impl Framer {
    pub(crate) fn new(framing: Framing, max_event: usize) -> Self {
        Framer {
            framing,
            buffer: Vec::new(),
            start: 0,
            scanned: 0,
            max_event,
            #[cfg(test)]
            looked: 0,
        }
    }

    /// Adds a chunk, first dropping the events already taken.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        if self.start > 0 {
            self.buffer.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
        self.buffer.extend_from_slice(chunk);
    }

    /// The next complete event (with its end of line or blank line); `Ok(None)` when the
    /// rest is partial; `Err` once the partial event is larger than the bound.
    pub(crate) fn next_event(&mut self) -> Result<Option<&[u8]>, TooLarge> {
        let from = self.scanned.max(self.start);
        let end = self.find_end(from);
        #[cfg(test)]
        {
            self.looked += end.map_or(self.buffer.len(), |e| e) - from;
        }
        match end {
            Some(end) => {
                let start = self.start;
                self.start = end;
                self.scanned = end;
                Ok(Some(&self.buffer[start..end]))
            }
            None => {
                self.scanned = self.buffer.len();
                if self.buffer.len() - self.start > self.max_event {
                    return Err(TooLarge);
                }
                Ok(None)
            }
        }
    }

    /// Where the event that begins at `self.start` ends, searching from `from` on: NDJSON
    /// at its newline; SSE after the blank line (LF LF, CRLF CRLF, or the two mixed).
    fn find_end(&self, from: usize) -> Option<usize> {
        let bytes = &self.buffer;
        match self.framing {
            Framing::Ndjson => bytes[from..]
                .iter()
                .position(|&b| b == b'\n')
                .map(|i| from + i + 1),
            Framing::Sse => {
                let start = self.start;
                (from..bytes.len()).find_map(|i| {
                    let blank = bytes[i] == b'\n'
                        && ((i > start && bytes[i - 1] == b'\n')
                            || (i > start + 1 && bytes[i - 1] == b'\r' && bytes[i - 2] == b'\n'));
                    blank.then_some(i + 1)
                })
            }
        }
    }

    /// What is left (a last event without its end), emptied.
    pub(crate) fn take_rest(&mut self) -> Vec<u8> {
        let rest = self.buffer.split_off(self.start);
        self.buffer.clear();
        self.start = 0;
        self.scanned = 0;
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(framer: &mut Framer) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(e) = framer.next_event().unwrap() {
            out.push(e.to_vec());
        }
        out
    }

    #[test]
    fn sse_events_end_at_a_blank_line_of_any_line_ending() {
        let mut f = Framer::new(Framing::Sse, 1 << 20);
        f.push(b"data: 1\n\ndata: 2\r\n\r\ndata: 3\r\n\ndata: 4\n\r\ndata: 5");
        let got = events(&mut f);
        assert_eq!(
            got,
            [
                b"data: 1\n\n".to_vec(),
                b"data: 2\r\n\r\n".to_vec(),
                b"data: 3\r\n\n".to_vec(),
                b"data: 4\n\r\n".to_vec(),
            ]
        );
        // The end arrives split over chunks.
        f.push(b"\r");
        assert!(events(&mut f).is_empty());
        f.push(b"\n\r");
        assert!(events(&mut f).is_empty());
        f.push(b"\n");
        assert_eq!(events(&mut f), [b"data: 5\r\n\r\n".to_vec()]);
        assert!(f.take_rest().is_empty());
    }

    #[test]
    fn ndjson_lines() {
        let mut f = Framer::new(Framing::Ndjson, 1 << 20);
        f.push(b"{\"a\":1}\n{\"b\"");
        assert_eq!(events(&mut f), [b"{\"a\":1}\n".to_vec()]);
        f.push(b":2}");
        assert!(events(&mut f).is_empty());
        assert_eq!(f.take_rest(), b"{\"b\":2}".to_vec());
    }

    /// One 8 MB event in 16 KB chunks, then small events: every byte is looked at once.
    #[test]
    fn each_byte_is_looked_at_once() {
        for framing in [Framing::Sse, Framing::Ndjson] {
            let mut f = Framer::new(framing, 16 << 20);
            let mut big = b"data: ".to_vec();
            big.resize(8 << 20, b'x');
            let end: &[u8] = if framing == Framing::Sse {
                b"\n\n"
            } else {
                b"\n"
            };
            big.extend_from_slice(end);
            let small = [b"data: y".as_slice(), end].concat();
            let stream: Vec<u8> = [big.clone(), small.repeat(1000)].concat();
            let mut got = Vec::new();
            for chunk in stream.chunks(16 * 1024) {
                f.push(chunk);
                got.extend(events(&mut f));
            }
            assert_eq!(got.len(), 1001);
            assert_eq!(got[0], big);
            assert_eq!(f.looked, stream.len(), "{framing:?}");
        }
    }

    #[test]
    fn an_event_past_the_bound_is_refused() {
        let mut f = Framer::new(Framing::Ndjson, 1024);
        f.push(&[b'a'; 1024]);
        assert_eq!(f.next_event(), Ok(None));
        f.push(b"a");
        assert_eq!(f.next_event(), Err(TooLarge));
        // An event just at the bound passes.
        let mut f = Framer::new(Framing::Ndjson, 1024);
        f.push(&[b'a'; 1023]);
        f.push(b"\n");
        assert_eq!(f.next_event().unwrap().map(<[u8]>::len), Some(1024));
    }
}
