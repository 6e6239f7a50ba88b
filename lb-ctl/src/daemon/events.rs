//! The daemon's recent events: health transitions, outlier ejections, API changes (drains,
//! undrains, adds, removes), host names resolved to new addresses, and reloads with what they
//! changed. One bounded ring, owned by the writer and fed where each of these happens (where
//! it is logged too); the status page and `GET /v1/events` show it newest first.
use std::collections::VecDeque;
use std::net::SocketAddr;

use crate::api::types::EventView;

/// How many events are kept; older ones are dropped.
pub const RECENT_EVENTS: usize = 100;

/// A ring of the most recent events.
#[derive(Debug)]
pub struct Events {
    ring: VecDeque<EventView>,
    capacity: usize,
}

impl Default for Events {
    fn default() -> Self {
        Events::with_capacity(RECENT_EVENTS)
    }
}

impl Events {
    pub fn with_capacity(capacity: usize) -> Events {
        Events { ring: VecDeque::with_capacity(capacity), capacity: capacity.max(1) }
    }

    /// Records an event that happened now.
    pub fn record(&mut self, kind: &str, vip: Option<String>, backend: Option<SocketAddr>, message: impl Into<String>) {
        self.push(EventView { at_unix: super::unix_now(), kind: kind.into(), vip, backend, message: message.into() });
    }

    pub fn push(&mut self, event: EventView) {
        if self.ring.len() == self.capacity {
            self.ring.pop_front();
        }
        self.ring.push_back(event);
    }

    /// Every event kept, newest first.
    pub fn newest_first(&self) -> Vec<EventView> {
        self.ring.iter().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: u64) -> EventView {
        EventView { at_unix: n, kind: "health".into(), vip: None, backend: None, message: format!("event {n}") }
    }

    #[test]
    fn the_ring_keeps_the_newest_events_newest_first() {
        let mut events = Events::with_capacity(3);
        assert!(events.newest_first().is_empty());
        for n in 1..=5 {
            events.push(event(n));
        }
        let kept: Vec<u64> = events.newest_first().iter().map(|e| e.at_unix).collect();
        assert_eq!(kept, [5, 4, 3], "bounded: the two oldest were dropped");
        assert_eq!(Events::default().capacity, RECENT_EVENTS);
    }

    #[test]
    fn an_event_in_json() {
        let mut events = Events::default();
        events.record("drain", Some("web".into()), Some("198.51.100.1:8080".parse().unwrap()), "web: drained");
        let json = serde_json::to_value(events.newest_first()).unwrap();
        let at = json[0]["at_unix"].as_u64().unwrap();
        assert!(at > 1_700_000_000, "a timestamp of now: {at}");
        assert_eq!(
            json,
            serde_json::json!([{
                "at_unix": at, "kind": "drain", "vip": "web", "backend": "198.51.100.1:8080", "message": "web: drained"
            }])
        );
    }
}
