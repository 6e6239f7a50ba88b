//! The connection tables' packet-side operations: find a flow in its set, record one (a free
//! way, else the set's least recently used). Layout and the check word: `lb_common::flow`.
//!
//! Ways are written without a lock. A writer clears the check word first and sets it last;
//! a reader accepts a way only if its check word matches the key's hash and the value it read
//! (`FlowSlot::holds`), so a way being written, or torn by two CPUs writing it at once, reads as
//! empty, whatever order the reader's loads happen in.
use core::ptr::{addr_of, addr_of_mut, write_volatile};

use aya_ebpf::helpers::generated::bpf_jiffies64;
use aya_ebpf::maps::Array;
use lb_common::config::DataplaneConfig;
use lb_common::flow::{FLOW_WAYS, FlowKey, FlowSet, FlowSlot, FlowValue, slot_check, table_hash};

/// What the tables need from CONFIG, and this packet's clock stamp.
#[derive(Clone, Copy)]
pub struct Tables {
    pub ring_size: u32,
    /// The rings' hash seed (`hash_seed`).
    pub ring_seed: u32,
    table_seed: u32,
    /// `flow_sets - 1`: the set is the hash's low bits.
    set_mask: u32,
    now: u32,
}

impl Tables {
    /// None until userspace has configured the rings and the tables.
    #[inline(always)]
    pub fn new(config: Option<&DataplaneConfig>) -> Option<Tables> {
        let config = config?;
        if config.ring_size == 0 || config.flow_sets == 0 {
            return None;
        }
        // SAFETY: plain helper call, which the kernel inlines as one load of `jiffies`.
        let now = unsafe { bpf_jiffies64() } as u32;
        Some(Tables {
            ring_size: config.ring_size,
            ring_seed: config.hash_seed,
            table_seed: config.table_seed,
            set_mask: config.flow_sets - 1,
            now,
        })
    }

    /// The table hash of `key`: which set it lives in, and part of its ways' check word.
    #[inline(always)]
    pub fn hash(&self, key: &FlowKey) -> u32 {
        table_hash(key, self.table_seed)
    }
}

/// What recording a flow did.
pub enum Recorded {
    /// Into a free way (or over a stale copy of the same key).
    Free,
    /// In place of the set's least recently used flow.
    Evicted,
    /// No such set (a table smaller than CONFIG says): not recorded.
    Failed,
}

#[inline(always)]
fn way<V>(set: *mut FlowSet<V>, index: usize) -> *mut FlowSlot<V> {
    // SAFETY: `index < FLOW_WAYS` at every caller; `set` points into a map value.
    unsafe { addr_of_mut!((*set).ways[index]) }
}

/// The way holding `key` (hash `hash`), its last-used stamp refreshed.
#[inline(always)]
pub fn find<V: FlowValue>(table: &Array<FlowSet<V>>, key: &FlowKey, hash: u32, t: &Tables) -> Option<*mut FlowSlot<V>> {
    let set = table.get_ptr_mut(hash & t.set_mask)?;
    for index in 0..FLOW_WAYS {
        let slot = way(set, index);
        // SAFETY: `slot` points into a map value.
        unsafe {
            if (*slot).holds(key, hash) {
                // Only when it changed: most packets then leave the line clean.
                if (*slot).used != t.now {
                    (*slot).used = t.now;
                }
                return Some(slot);
            }
        }
    }
    None
}

/// Records `key → value` in a free way of its set, else in place of the least recently used.
#[inline(always)]
pub fn record<V: FlowValue>(table: &Array<FlowSet<V>>, key: &FlowKey, hash: u32, value: &V, t: &Tables) -> Recorded {
    let Some(set) = table.get_ptr_mut(hash & t.set_mask) else {
        return Recorded::Failed;
    };
    let mut victim = 0;
    let mut oldest = 0;
    let mut evicts = true;
    for index in 0..FLOW_WAYS {
        let slot = way(set, index);
        // SAFETY: `slot` points into a map value.
        let (free, age) = unsafe { ((*slot).check == 0 || (*slot).key.same_as(key), t.now.wrapping_sub((*slot).used)) };
        if free {
            victim = index;
            evicts = false;
            break;
        }
        if index == 0 || age > oldest {
            victim = index;
            oldest = age;
        }
    }
    write(way(set, victim), key, hash, value, t);
    if evicts { Recorded::Evicted } else { Recorded::Free }
}

/// Gives a found flow a new value (its backend changed).
#[inline(always)]
pub fn replace<V: FlowValue>(slot: *mut FlowSlot<V>, hash: u32, value: &V, t: &Tables) {
    // SAFETY: `slot` points into a map value.
    let key = unsafe { (*slot).key };
    write(slot, &key, hash, value, t);
}

/// Writes a whole way: check cleared, key and value, then the new check, each store volatile so
/// the compiler keeps that order.
#[inline(always)]
fn write<V: FlowValue>(slot: *mut FlowSlot<V>, key: &FlowKey, hash: u32, value: &V, t: &Tables) {
    let new = FlowSlot { key: *key, value: *value, used: t.now, check: slot_check(hash, value) };
    let words = core::mem::size_of::<FlowSlot<V>>() / 8;
    let src = addr_of!(new) as *const u64;
    let dst = slot as *mut u64;
    // SAFETY: `slot` points into a map value of `words` 8-byte aligned words; the last word
    // holds `used` and `check`.
    unsafe {
        write_volatile(addr_of_mut!((*slot).check), 0);
        for i in 0..words - 1 {
            write_volatile(dst.add(i), *src.add(i));
        }
        write_volatile(dst.add(words - 1), *src.add(words - 1));
    }
}
