//! Event streams (`Guard::events`): each stream has its own bounded buffer. Sending an event
//! never waits: a stream whose reader is behind drops its oldest event and counts it. A
//! stream ends when the guard closes (or is dropped); a stream dropped by its reader is
//! forgotten at the next event. A stream does not cross a `fork()`: in a forked child, one
//! made before the fork reads as ended (its lock may have been held by a parent thread).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::lock::Mutex;

use crate::fork::ForkLocal;
use crate::guard::domain::event::Event;

#[derive(Default)]
struct Buffer {
    events: VecDeque<Event>,
    dropped: u64,
    closed: bool,
}

struct Subscriber {
    capacity: usize,
    /// The fork generation the stream was made in.
    generation: u64,
    buffer: Mutex<Buffer>,
    arrived: tokio::sync::Notify,
}

impl Subscriber {
    /// The buffer, unless the stream was made before a fork (it has ended here).
    fn buffer(&self) -> Option<std::sync::MutexGuard<'_, Buffer>> {
        (self.generation == crate::fork::generation()).then(|| self.buffer.lock())
    }

    fn close(&self) {
        if let Some(mut buffer) = self.buffer() {
            buffer.closed = true;
            drop(buffer);
            self.arrived.notify_waiters();
        }
    }
}

/// Whether a stream is still read: someone holds it and it was not closed.
fn open(sub: &Arc<Subscriber>) -> bool {
    Arc::strong_count(sub) > 1 && !sub.buffer.lock().closed
}

/// The streams of a guard.
#[derive(Default)]
pub(crate) struct EventHub {
    /// This process's streams.
    streams: ForkLocal<Mutex<Vec<Arc<Subscriber>>>>,
}

impl EventHub {
    /// A new stream holding at most `capacity` unread events (at least 1).
    pub(crate) fn subscribe(&self, capacity: usize) -> EventStream {
        let sub = Arc::new(Subscriber {
            capacity: capacity.max(1),
            generation: crate::fork::generation(),
            buffer: Mutex::default(),
            arrived: tokio::sync::Notify::new(),
        });
        self.streams.get().lock().push(sub.clone());
        EventStream { sub }
    }

    /// Whether some stream is open.
    pub(crate) fn has_streams(&self) -> bool {
        let mut streams = self.streams.get().lock();
        streams.retain(open);
        !streams.is_empty()
    }

    /// Gives `event` to every open stream; a full stream drops its oldest event.
    pub(crate) fn send(&self, event: &Event) {
        let streams: Vec<Arc<Subscriber>> = {
            let mut streams = self.streams.get().lock();
            streams.retain(open);
            streams.clone()
        };
        for sub in streams {
            let mut buffer = sub.buffer.lock();
            if buffer.closed {
                continue;
            }
            if buffer.events.len() >= sub.capacity {
                buffer.events.pop_front();
                buffer.dropped += 1;
            }
            buffer.events.push_back(event.clone());
            drop(buffer);
            sub.arrived.notify_waiters();
        }
    }

    /// Ends every stream open now (each still yields what it holds, then ends).
    pub(crate) fn close(&self) {
        for sub in std::mem::take(&mut *self.streams.get().lock()) {
            sub.close();
        }
    }
}

impl Drop for EventHub {
    fn drop(&mut self) {
        self.close();
    }
}

/// A guard's events as they go out, from when the stream was made. Clones read the same
/// stream.
#[derive(Clone)]
pub struct EventStream {
    sub: Arc<Subscriber>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (buffered, dropped, closed) = self
            .sub
            .buffer()
            .map_or((0, 0, true), |b| (b.events.len(), b.dropped, b.closed));
        f.debug_struct("EventStream")
            .field("buffered", &buffered)
            .field("dropped", &dropped)
            .field("closed", &closed)
            .finish()
    }
}

impl EventStream {
    /// The next event, waiting for one; `None` once the stream ended and is empty.
    pub async fn next(&self) -> Option<Event> {
        loop {
            // Made before the check: an event sent in between still wakes it.
            let arrived = self.sub.arrived.notified();
            {
                let mut buffer = self.sub.buffer()?;
                if let Some(event) = buffer.events.pop_front() {
                    return Some(event);
                }
                if buffer.closed {
                    return None;
                }
            }
            arrived.await;
        }
    }

    /// The next event if one is buffered, without waiting.
    pub fn try_next(&self) -> Option<Event> {
        self.sub.buffer()?.events.pop_front()
    }

    /// Events dropped because the buffer was full (the oldest go first).
    pub fn dropped(&self) -> u64 {
        self.sub.buffer().map_or(0, |b| b.dropped)
    }

    /// Whether the stream ended (its guard closed, or `close`): what it holds is still read.
    pub fn is_closed(&self) -> bool {
        self.sub.buffer().is_none_or(|b| b.closed)
    }

    /// Ends this stream (a waiting `next` returns what is left, then `None`).
    pub fn close(&self) {
        self.sub.close();
    }
}
