//! The connection tables' packet-side operations: find a flow in its set, record one (a free
//! way, else the least recently used way it may take: a first packet only one that does not
//! protect its flow), mark a flow proven or closed. Layout, the check word and the stamp's
//! flags: `lb_common::flow`.
//!
//! Ways are written without a lock. A writer clears the check word first and sets it last;
//! a reader accepts a way only if its check word matches the key's hash and the value it read
//! (`FlowSlot::holds`), so a way being written, or torn by two CPUs writing it at once, reads as
//! empty, whatever order the reader's loads happen in.
use core::ptr::{addr_of, addr_of_mut, write_volatile};

use aya_ebpf::helpers::generated::bpf_jiffies64;
use aya_ebpf::maps::Array;
use lb_common::config::DataplaneConfig;
use lb_common::flow::{
    ANSWERED, CLOSED, FLOW_WAYS, FlowEntry, FlowKey, FlowSet, FlowSlot, FlowValue, PROVEN, REPLY_CHECK_SHIFT,
    REPLY_LOST, STAMP_FLAGS, protects, slot_check,
};
use lb_common::table_hash::TableHash;

/// What the tables need from CONFIG, and this packet's clock stamp.
#[derive(Clone, Copy)]
pub struct Tables {
    pub ring_size: u32,
    /// The rings' hash seed (`hash_seed`).
    pub ring_seed: u32,
    /// The tables' hash, kind and seed: kept with the tables (CONFIG).
    table_hash: TableHash,
    /// `flow_sets - 1`: the set is the hash's low bits.
    set_mask: u32,
    /// The kernel tick, `STAMP_FLAGS` cleared (they hold a way's flags in its stamp).
    now: u32,
    /// `DataplaneConfig::new_flow_budget`.
    pub new_flow_budget: u32,
    /// `DataplaneConfig::share_flows`: report recorded flows on FLOW_EVENTS.
    pub share_flows: bool,
    /// `DataplaneConfig::nexthop_generation`: which cached next hops still hold (read here,
    /// with the rest of CONFIG, rather than in a lookup of its own per packet).
    pub nexthop_generation: u32,
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
        let now = unsafe { bpf_jiffies64() } as u32 & !STAMP_FLAGS;
        Some(Tables {
            ring_size: config.ring_size,
            ring_seed: config.hash_seed,
            table_hash: config.table_hash(),
            set_mask: config.flow_sets - 1,
            now,
            new_flow_budget: config.new_flow_budget,
            share_flows: config.share_flows != 0,
            nexthop_generation: config.nexthop_generation,
        })
    }

    /// The table hash of `key`: which set it lives in, and part of its ways' check word.
    #[inline(always)]
    pub fn hash(&self, key: &FlowKey) -> u32 {
        self.table_hash.of(key)
    }
}

/// What recording a flow did.
pub enum Recorded {
    /// Into a free way (or over a stale copy of the same key).
    Free,
    /// In place of the least recently used flow it was allowed to take.
    Evicted,
    /// Not recorded: a first packet, and every way of its set protects a live proven flow.
    Protected,
    /// No such set (a table smaller than CONFIG says): not recorded.
    Failed,
}

#[inline(always)]
fn way<V>(set: *mut FlowSet<V>, index: usize) -> *mut FlowSlot<V> {
    // SAFETY: `index < FLOW_WAYS` at every caller; `set` points into a map value.
    unsafe { addr_of_mut!((*set).ways[index]) }
}

/// The way holding `key` (hash `hash`), its last-used stamp refreshed (flags kept).
#[inline(always)]
pub fn find<V: FlowValue>(table: &Array<FlowSet<V>>, key: &FlowKey, hash: u32, t: &Tables) -> Option<*mut FlowSlot<V>> {
    find_stamped(table, key, hash, t).map(|(slot, _)| slot)
}

/// As [`find`], and the way's stamp before this packet (for [`reply_check_due`]).
#[inline(always)]
pub fn find_stamped<V: FlowValue>(
    table: &Array<FlowSet<V>>,
    key: &FlowKey,
    hash: u32,
    t: &Tables,
) -> Option<(*mut FlowSlot<V>, u32)> {
    let set = table.get_ptr_mut(hash & t.set_mask)?;
    for index in 0..FLOW_WAYS {
        let slot = way(set, index);
        // SAFETY: `slot` points into a map value.
        unsafe {
            if (*slot).holds(key, hash) {
                let used = (*slot).used;
                // Only when it changed: most packets then leave the line clean.
                if used & !STAMP_FLAGS != t.now {
                    (*slot).used = t.now | (used & STAMP_FLAGS);
                }
                return Some((slot, used));
            }
        }
    }
    None
}

/// Reads the check word of the first way of `hash`'s set, as [`find_stamped`] reads it first
/// (the floor under its cost: `floor`).
#[inline(always)]
pub fn read_set<V>(table: &Array<FlowSet<V>>, hash: u32, t: &Tables) {
    if let Some(set) = table.get_ptr(hash & t.set_mask) {
        // SAFETY: `set` points into a map value; volatile, so the read is not left out.
        unsafe { core::ptr::read_volatile(addr_of!((*set).ways[0].check)) };
    }
}

/// Whether a NAT flow's packet checks its reply entry, given its FLOWS way's stamp before the
/// packet: the entry is marked lost, or this is the flow's first packet of a reply-check period.
#[inline(always)]
pub fn reply_check_due(used: u32, t: &Tables) -> bool {
    used & REPLY_LOST != 0 || used >> REPLY_CHECK_SHIFT != t.now >> REPLY_CHECK_SHIFT
}

/// A found FLOWS way's reply entry was found in REVERSE_FLOWS: the lost mark, if any, goes.
#[inline(always)]
pub fn reply_kept(slot: *mut FlowSlot<FlowEntry>) {
    // SAFETY: `slot` points into a map value.
    unsafe {
        let used = (*slot).used;
        // Only when marked: most packets then leave the line clean.
        if used & REPLY_LOST != 0 {
            (*slot).used = used & !REPLY_LOST;
        }
    }
}

/// Marks the FLOWS way holding `key` (hash `hash`) [`REPLY_LOST`], its stamp left as it is (no
/// packet of the flow was seen). Nothing if the table does not hold the flow.
#[inline(always)]
pub fn mark_reply_lost(table: &Array<FlowSet<FlowEntry>>, key: &FlowKey, hash: u32, t: &Tables) {
    let Some(set) = table.get_ptr_mut(hash & t.set_mask) else {
        return;
    };
    for index in 0..FLOW_WAYS {
        let slot = way(set, index);
        // SAFETY: `slot` points into a map value.
        unsafe {
            if (*slot).holds(key, hash) {
                (*slot).used |= REPLY_LOST;
                return;
            }
        }
    }
}

/// Marks a found way's flow as proven (it sent more than its first packet); true when it was
/// not yet. A closed flow is not proven again: its packets after the FIN or RST are the
/// closing handshake, not a sign of life.
#[inline(always)]
pub fn prove<V>(slot: *mut FlowSlot<V>) -> bool {
    // SAFETY: `slot` points into a map value.
    unsafe {
        let used = (*slot).used;
        if used & (PROVEN | CLOSED) == 0 {
            (*slot).used = used | PROVEN;
            return true;
        }
    }
    false
}

/// Whether a found way's flow is proven (and not closed since).
#[inline(always)]
pub fn is_proven<V>(slot: *mut FlowSlot<V>) -> bool {
    // SAFETY: `slot` points into a map value.
    unsafe { (*slot).used & (PROVEN | CLOSED) == PROVEN }
}

/// Marks a found reply entry as answered (see `lb_common::flow::ANSWERED`).
#[inline(always)]
pub fn answered<V>(slot: *mut FlowSlot<V>) {
    // SAFETY: `slot` points into a map value.
    unsafe {
        let used = (*slot).used;
        // Only the first reply writes: the rest leave the line clean.
        if used & ANSWERED == 0 {
            (*slot).used = used | ANSWERED;
        }
    }
}

/// Marks a found way's flow as closed (a TCP FIN or RST in its direction): it stays findable
/// but no longer protects its way (see `lb_common::flow::CLOSED`).
#[inline(always)]
pub fn close<V>(slot: *mut FlowSlot<V>) {
    // SAFETY: `slot` points into a map value.
    unsafe {
        let used = (*slot).used;
        // Only when it changes: a retransmitted FIN leaves the line clean.
        if used & (PROVEN | CLOSED) != CLOSED {
            (*slot).used = (used & !(PROVEN | CLOSED)) | CLOSED;
        }
    }
}

/// Records `key → value` in a free way of its set, else in place of the least recently used
/// way it may take. An unproven flow (a first packet) may take only a way that does not
/// protect its flow (unproven, closed, or idle past `PROTECT_IDLE_TICKS`); a proven one (say,
/// an established connection the table lost) prefers those, else the least recently used.
/// `evicting` is shown the way about to be taken from another flow, before it is written.
#[inline(always)]
pub fn record<V: FlowValue>(
    table: &Array<FlowSet<V>>,
    (key, hash, value): (&FlowKey, u32, &V),
    proven: bool,
    t: &Tables,
    evicting: impl FnOnce(*const FlowSlot<V>),
) -> Recorded {
    let Some(set) = table.get_ptr_mut(hash & t.set_mask) else {
        return Recorded::Failed;
    };
    // Ways that protect nothing sort before live proven ones (their age gets the top bit), and
    // among them answered ones before those still waiting for their backend's first answer
    // (the next bit): a new connection's reply entry outlives a flood's until its SYN-ACK.
    let proven_bit = if proven { PROVEN } else { 0 };
    let mut victim = FLOW_WAYS;
    let mut best = 0u32;
    let mut evicts = true;
    for index in 0..FLOW_WAYS {
        let slot = way(set, index);
        // SAFETY: `slot` points into a map value.
        let (free, used) = unsafe { ((*slot).check == 0 || (*slot).key.same_as(key), (*slot).used) };
        if free {
            victim = index;
            evicts = false;
            break;
        }
        let protected = protects(used, t.now);
        let waiting = used & ANSWERED == 0;
        let rank = if protected {
            0
        } else if waiting {
            1 << 31
        } else {
            3 << 30
        };
        let age = (t.now.wrapping_sub(used & !STAMP_FLAGS) >> 2) | rank;
        let allowed = proven || !protected;
        if allowed && (victim == FLOW_WAYS || age > best) {
            victim = index;
            best = age;
        }
    }
    if victim >= FLOW_WAYS {
        return Recorded::Protected;
    }
    if evicts {
        evicting(way(set, victim));
    }
    write(way(set, victim), key, hash, value, proven_bit, t);
    if evicts { Recorded::Evicted } else { Recorded::Free }
}

/// Gives a found flow a new value (its backend changed, or a new connection reuses its
/// 5-tuple), proven or not.
#[inline(always)]
pub fn replace<V: FlowValue>(slot: *mut FlowSlot<V>, hash: u32, value: &V, proven: bool, t: &Tables) {
    // SAFETY: `slot` points into a map value.
    let key = unsafe { (*slot).key };
    write(slot, &key, hash, value, if proven { PROVEN } else { 0 }, t);
}

/// Writes a whole way: check cleared, key and value, then the new check, each store volatile so
/// the compiler keeps that order.
#[inline(always)]
fn write<V: FlowValue>(slot: *mut FlowSlot<V>, key: &FlowKey, hash: u32, value: &V, proven: u32, t: &Tables) {
    let new = FlowSlot { key: *key, value: *value, used: t.now | proven, check: slot_check(hash, value) };
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
