//! RINGS mapped into our memory: a ring is rewritten with plain stores. Each slot is one
//! aligned u32, so the XDP program reads either the old or the new backend id, never a torn
//! value.
use std::sync::atomic::{AtomicU32, Ordering};

use aya::maps::Map;

use super::array_mmap::ArrayMmap;

pub struct RingsMmap(ArrayMmap);

impl RingsMmap {
    /// Maps `slots` u32 slots of the RINGS map, if the kernel allows it.
    pub fn new(map: &Map, slots: usize) -> Option<RingsMmap> {
        ArrayMmap::new(map, slots, size_of::<u32>(), true).map(RingsMmap)
    }

    fn slot(&self, index: usize) -> &AtomicU32 {
        // SAFETY: an aligned u32 inside the mapping, which lives as long as self.
        unsafe { &*self.0.element::<AtomicU32>(index) }
    }

    pub fn get(&self, index: usize) -> u32 {
        self.slot(index).load(Ordering::Relaxed)
    }

    pub fn set(&self, index: usize, value: u32) {
        self.slot(index).store(value, Ordering::Release);
    }
}
