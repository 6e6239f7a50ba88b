//! RINGS mapped into our memory (the map is created BPF_F_MMAPABLE): a ring is rewritten with
//! plain stores. Each slot is one aligned u32, so the XDP program reads either the old or the
//! new backend id, never a torn value. The kernel lays array elements out 8 bytes apart
//! (value size rounded up to 8), so slot i is the first u32 of element i. Pinned maps from a build without the flag cannot be
//! mapped; the writer then falls back to one syscall a slot.
use std::os::fd::{AsFd as _, AsRawFd as _};
use std::sync::atomic::{AtomicU32, Ordering};

use aya::maps::Map;

/// Distance between array elements in u32s: the kernel rounds a 4-byte value up to 8 bytes.
const STRIDE: usize = 2;

pub struct RingsMmap {
    base: *mut AtomicU32,
    slots: usize,
    bytes: usize,
}

// SAFETY: the mapping is owned by this value and only accessed through &self/&mut self.
unsafe impl Send for RingsMmap {}

impl RingsMmap {
    /// Maps `slots` u32 slots of the RINGS map, if the kernel allows it.
    pub fn new(map: &Map, slots: usize) -> Option<RingsMmap> {
        let Map::Array(data) = map else { return None };
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let bytes = (slots * STRIDE * 4).div_ceil(page) * page;
        let fd = data.fd().as_fd().as_raw_fd();
        // SAFETY: mapping a BPF array map's fd, shared, for its whole (page-rounded) size.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        Some(RingsMmap { base: ptr.cast(), slots, bytes })
    }

    fn slot(&self, index: usize) -> &AtomicU32 {
        assert!(index < self.slots, "ring slot {index} beyond the map ({} slots)", self.slots);
        // SAFETY: in bounds of the mapping, 4-byte aligned (page-aligned base, 8-byte stride).
        unsafe { &*self.base.add(index * STRIDE) }
    }

    pub fn get(&self, index: usize) -> u32 {
        self.slot(index).load(Ordering::Relaxed)
    }

    pub fn set(&self, index: usize, value: u32) {
        self.slot(index).store(value, Ordering::Release);
    }
}

impl Drop for RingsMmap {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.base.cast(), self.bytes) };
    }
}
