//! Stable ids for VIPs and backends.
//!
//! Ids are handed out round-robin: a freed id is given again only after every other free id
//! has been, so a connection-table entry that still names a removed backend id cannot land on
//! a different backend that happened to get the same id right away (the data plane re-places
//! such flows as soon as it sees the id removed).
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// Allocates ids in `0..limit`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdAllocator {
    limit: u32,
    /// Where the search for the next free id starts.
    next: u32,
    used: BTreeSet<u32>,
}

impl IdAllocator {
    pub fn new(limit: u32) -> Self {
        IdAllocator { limit, next: 0, used: BTreeSet::new() }
    }

    /// The next free id after the last one given, wrapping; `None` when all are in use.
    pub fn alloc(&mut self) -> Option<u32> {
        let id = (0..self.limit).map(|i| (self.next + i) % self.limit).find(|id| !self.used.contains(id))?;
        self.used.insert(id);
        self.next = (id + 1) % self.limit;
        Some(id)
    }

    /// Marks `id` used (ids restored from a previous run).
    pub fn reserve(&mut self, id: u32) {
        self.used.insert(id);
    }

    /// Marks `id` used if it is free and in range; false if it is not.
    pub fn try_reserve(&mut self, id: u32) -> bool {
        id < self.limit && self.used.insert(id)
    }

    /// Gives `id` back.
    pub fn free(&mut self, id: u32) {
        self.used.remove(&id);
    }

    pub fn in_use(&self) -> usize {
        self.used.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_does_not_reuse_a_freed_id_at_once() {
        let mut ids = IdAllocator::new(4);
        assert_eq!([ids.alloc(), ids.alloc(), ids.alloc()], [Some(0), Some(1), Some(2)]);
        ids.free(1);
        assert_eq!(ids.alloc(), Some(3), "1 was just freed: take a fresh id");
        assert_eq!(ids.alloc(), Some(1), "then wrap to the freed one");
        assert_eq!(ids.alloc(), None, "all 4 in use");
        ids.free(0);
        ids.free(2);
        assert_eq!(ids.alloc(), Some(2));
        assert_eq!(ids.alloc(), Some(0));
    }

    #[test]
    fn reserved_ids_are_skipped() {
        let mut ids = IdAllocator::new(10);
        ids.reserve(0);
        ids.reserve(1);
        ids.reserve(3);
        assert_eq!(ids.alloc(), Some(2));
        assert_eq!(ids.alloc(), Some(4));
        assert_eq!(ids.in_use(), 5);
    }
}
