//! The process allocator for binaries that run the proxy: glibc's malloc, with over-aligned
//! small blocks served by padding instead of `posix_memalign`.
//!
//! tokio aligns every task and every socket registration to 128 bytes (a cache line pair), so
//! each accepted connection makes two such allocations. glibc serves them with
//! `_int_memalign`, which bypasses its per-thread cache, carves a larger chunk and frees the
//! pieces around the aligned part: about 1.4k instructions to allocate the pair and more to
//! free it, a tenth of what a new connection costs the proxy in user space (callgrind).
//! Asking `malloc` for the size plus the alignment and returning the aligned address inside
//! costs a cached `malloc` and 128 bytes a block. mimalloc and jemalloc also allocate these
//! cheaply, but with their defaults keep a burst's memory (see `trim.rs`), which glibc with
//! `malloc_trim` gives back. Measured again against this (docs/benchmarks.md, "Instructions
//! per request", e4dfbed): jemalloc set to purge in the background gives memory back as
//! glibc does but takes 0.9k more instructions per new connection; mimalloc saves 0.8k but
//! keeps twice glibc's memory after a burst even when collected. So this keeps glibc.
use std::alloc::{GlobalAlloc, Layout, System};
use std::os::unix::process::CommandExt;

/// glibc's `malloc` returns blocks aligned to 16 bytes on 64-bit targets.
const MALLOC_ALIGN: usize = 16;
/// Alignments up to this are padded; larger ones (pages) go to `posix_memalign` as before.
const MAX_PADDED_ALIGN: usize = 256;
/// Where the block `malloc` returned is recorded: the word just before the aligned address.
const SLOT: usize = size_of::<*mut u8>();

/// glibc's tunable for how many free blocks of each size (up to 1032 bytes) its per-thread
/// cache keeps: 7 by default. A worker with many requests in flight (h2 streams, a burst of
/// connections) frees and asks for more than 7 blocks of one size at a time, and the rest go
/// through malloc's bins, with consolidation whenever a block over 1 KiB is asked for: about
/// 1.7k instructions per h2 request and 0.6k per new HTTP/1 connection (callgrind,
/// docs/benchmarks.md). 64 a size holds at most about 2 MiB a thread (64 blocks of each of
/// the 64 sizes), in practice a few of the sizes.
pub const MALLOC_TUNING: &str = "glibc.malloc.tcache_count=64";
const TCACHE_COUNT: &str = "glibc.malloc.tcache_count";

/// Starts this program again, as it is (same executable, arguments and pid), with
/// [`MALLOC_TUNING`] added to `GLIBC_TUNABLES`: glibc reads tunables only as a process starts.
/// Returns at once when `tcache_count` is already set (the second start, or an operator's own
/// choice, which stays); also when the start fails, the process then going on with glibc's
/// defaults after saying so on stderr (logging is not set up yet). Call first thing in
/// `main`, before any thread or file is opened.
pub fn restart_with_malloc_tuning() {
    let current = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if current.split(':').any(|t| t.starts_with(TCACHE_COUNT)) {
        return;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return not_tuned(&e),
    };
    let tunables = if current.is_empty() { MALLOC_TUNING.to_string() } else { format!("{current}:{MALLOC_TUNING}") };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    // Returns only if the exec failed.
    let e = command.args(args).env("GLIBC_TUNABLES", tunables).exec();
    not_tuned(&e);
}

/// The operator's word that the process goes on untuned: proxy VIPs cost more per request, and
/// `GLIBC_TUNABLES` in the startup log says the same.
fn not_tuned(e: &std::io::Error) {
    eprintln!("warning: {MALLOC_TUNING} not applied (could not restart with it: {e}); going on with glibc's defaults");
}

/// Use as `#[global_allocator] static A: lb_proxy::Allocator = lb_proxy::Allocator;`.
pub struct Allocator;

fn padded(layout: Layout) -> bool {
    layout.align() > MALLOC_ALIGN && layout.align() <= MAX_PADDED_ALIGN
}

// SAFETY: every block is either System's (forwarded as is) or a malloc block whose address is
// stored in the word before the aligned pointer handed out, which `dealloc` reads back; which
// of the two a pointer is follows from its layout, the same at allocation and deallocation.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !padded(layout) {
            // SAFETY: forwarded with the caller's layout.
            return unsafe { System.alloc(layout) };
        }
        let Some(size) = layout.size().checked_add(layout.align()) else {
            return std::ptr::null_mut();
        };
        // SAFETY: malloc with a non-zero size; null is returned to the caller as failure.
        let block = unsafe { libc::malloc(size) }.cast::<u8>();
        if block.is_null() {
            return block;
        }
        // `block` is 16-aligned and the alignment a larger power of two, so the next aligned
        // address is 16 to `align` bytes in: room for the slot, and the size still fits.
        let offset = layout.align() - (block as usize & (layout.align() - 1));
        // SAFETY: offset <= align, so aligned + size stays within the block.
        let aligned = unsafe { block.add(offset) };
        // SAFETY: offset >= 16 > SLOT, so the slot lies inside the block; it is 8-aligned.
        unsafe { aligned.sub(SLOT).cast::<*mut u8>().write(block) };
        aligned
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !padded(layout) {
            // SAFETY: allocated by System with this layout.
            return unsafe { System.dealloc(ptr, layout) };
        }
        // SAFETY: `alloc` wrote the block's address there.
        let block = unsafe { ptr.sub(SLOT).cast::<*mut u8>().read() };
        // SAFETY: `block` came from malloc and is freed once.
        unsafe { libc::free(block.cast()) };
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !padded(layout) {
            // SAFETY: forwarded with the caller's layout.
            return unsafe { System.alloc_zeroed(layout) };
        }
        // SAFETY: as `alloc`; the zeroing covers the caller's bytes only.
        let ptr = unsafe { self.alloc(layout) };
        if !ptr.is_null() {
            // SAFETY: `ptr` is valid for `layout.size()` bytes.
            unsafe { ptr.write_bytes(0, layout.size()) };
        }
        ptr
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !padded(layout) {
            // SAFETY: forwarded; the new layout keeps the alignment, so it is System's too.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller guarantees new_size makes a valid layout with this alignment.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as `alloc`.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the smaller size and do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size)) };
            // SAFETY: `ptr` was allocated here with `layout`.
            unsafe { self.dealloc(ptr, layout) };
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_writable_and_freed_for_every_alignment() {
        let a = Allocator;
        for align in [1, 8, 16, 32, 64, 128, 256, 4096] {
            for size in [1, 24, 128, 200, 4096] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero sizes; every block is freed with its layout.
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    p.write_bytes(0xa5, size);
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0);
                    assert!(std::slice::from_raw_parts(z, size).iter().all(|b| *b == 0));
                    let grown = a.realloc(p, layout, size * 3);
                    assert_eq!(grown as usize % align, 0);
                    assert!(std::slice::from_raw_parts(grown, size).iter().all(|b| *b == 0xa5));
                    a.dealloc(grown, Layout::from_size_align(size * 3, align).unwrap());
                    a.dealloc(z, layout);
                }
            }
        }
    }
}
