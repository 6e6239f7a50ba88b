//! A BPF array map (created BPF_F_MMAPABLE) mapped into our memory, so userspace reads or writes
//! its elements with plain memory accesses instead of one syscall each. The kernel lays the
//! elements out `value size rounded up to 8` bytes apart. Pinned maps from a build without the
//! flag cannot be mapped: `new` then gives None and callers fall back to syscalls.
use std::os::fd::{AsFd as _, AsRawFd as _};

use aya::maps::Map;

pub struct ArrayMmap {
    base: *mut u8,
    len: usize,
    stride: usize,
    bytes: usize,
}

// SAFETY: the mapping is owned by this value and only accessed through &self.
unsafe impl Send for ArrayMmap {}

impl ArrayMmap {
    /// Maps the first `len` elements (of `value_size` bytes) of an array map, if the kernel
    /// allows it; read-only unless `writable`.
    pub fn new(map: &Map, len: usize, value_size: usize, writable: bool) -> Option<ArrayMmap> {
        let Map::Array(data) = map else { return None };
        let stride = value_size.next_multiple_of(8);
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let bytes = (len * stride).div_ceil(page).max(1) * page;
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        let fd = data.fd().as_fd().as_raw_fd();
        // SAFETY: mapping a BPF array map's fd, shared, for (at most) its page-rounded size.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), bytes, prot, libc::MAP_SHARED, fd, 0) };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        Some(ArrayMmap { base: ptr.cast(), len, stride, bytes })
    }

    /// Element `index`: page-aligned base plus a multiple of 8, so aligned for any map value.
    pub fn element<T>(&self, index: usize) -> *mut T {
        assert!(index < self.len, "element {index} beyond the mapping ({} elements)", self.len);
        assert!(size_of::<T>() <= self.stride && align_of::<T>() <= 8);
        // SAFETY: in bounds of the mapping.
        unsafe { self.base.add(index * self.stride).cast() }
    }
}

impl Drop for ArrayMmap {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.base.cast(), self.bytes) };
    }
}
