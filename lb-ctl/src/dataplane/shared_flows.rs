//! Flows another balancer placed (flow sharing), written into FLOWS through its memory mapping
//! with the program's own protocol (`lb-ebpf` `table::write`): check word cleared first, key
//! and value, then the last word (stamp and check) in one store. A way the program writes at
//! the same moment reads as empty, never as a wrong backend.
use std::ptr::{addr_of, addr_of_mut, read_volatile, write_volatile};

use lb_common::flow::{FLOW_WAYS, FlowEntry, FlowSlot, ForwardSet, PROVEN, STAMP_FLAGS, SharedFlow, slot_check};

use super::Result;
use super::aya::AyaDataplane;

/// The kernel's tick count (`jiffies`), which the program stamps ways with; None when
/// `/proc/timer_list` cannot be read.
fn jiffies() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/timer_list").ok()?;
    let line = text.lines().find(|l| l.starts_with("jiffies:"))?;
    line.trim_start_matches("jiffies:").trim().parse::<u64>().ok().map(|j| j as u32)
}

impl AyaDataplane {
    pub(super) fn write_shared_flows(&mut self, flows: &[SharedFlow]) -> Result<usize> {
        let now = jiffies();
        let mut written = 0;
        for f in flows {
            let Some(backend) = self.backend(f.backend_id)? else { continue };
            let hash = self.table_hash().of(&f.key);
            let Some(set) = self.flow_set_ptr(hash) else { return Ok(written) };
            // SAFETY: an element of the mapping; the program may be writing it (see above).
            let current: ForwardSet = unsafe { read_volatile(set) };
            if current.find(&f.key, hash).is_some() {
                continue; // this node placed it itself: its own entry stands
            }
            // A free way, else the least recently used (the stamps are ticks; the largest in
            // the set stands in for "now" when the clock cannot be read).
            let latest = now.unwrap_or_else(|| current.ways.iter().map(|w| w.used & !STAMP_FLAGS).max().unwrap_or(0));
            let age = |w: &FlowSlot<FlowEntry>| latest.wrapping_sub(w.used & !STAMP_FLAGS);
            let victim = current
                .ways
                .iter()
                .position(|w| w.check == 0)
                .unwrap_or_else(|| (0..FLOW_WAYS).max_by_key(|i| age(&current.ways[*i])).expect("a set has ways"));
            let value =
                FlowEntry { backend_id: f.backend_id, vip_id: f.vip_id, generation: backend.generation, reply_hash: 0 };
            // Proven: the flow is established on the balancer that placed it.
            let way =
                FlowSlot { key: f.key, value, used: (latest & !STAMP_FLAGS) | PROVEN, check: slot_check(hash, &value) };
            // SAFETY: `set` points into the mapping; `victim < FLOW_WAYS`; a way is eight
            // 8-byte aligned words, the last holding `used` and `check`.
            unsafe {
                let slot = addr_of_mut!((*set).ways[victim]);
                write_volatile(addr_of_mut!((*slot).check), 0);
                let (src, dst) = (addr_of!(way) as *const u64, slot as *mut u64);
                let words = size_of::<FlowSlot<FlowEntry>>() / 8;
                for i in 0..words - 1 {
                    write_volatile(dst.add(i), *src.add(i));
                }
                std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
                write_volatile(dst.add(words - 1), *src.add(words - 1));
            }
            written += 1;
        }
        Ok(written)
    }
}
