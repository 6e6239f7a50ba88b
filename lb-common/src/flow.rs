//! The connection tables: which backend each flow was given (FLOWS), and the reverse index used
//! to rewrite NAT replies back to the VIP (REVERSE_FLOWS).
//!
//! Both are set-associative LRU tables in BPF arrays rather than kernel LRU hash maps: a flow
//! lives in one of the `FLOW_WAYS` ways of the set its hash names, and a new flow takes a free
//! way or evicts the least recently used one of its set. Recording a flow is then a few stores
//! instead of a kernel hash insert (~250 ns, more than all the rest of a new flow's work: the
//! new-flow rows of `cargo xtask bench dataplane` with kernel LRU hash maps against these
//! tables), and finding one is an array index and a few compares.
//!
//! The program writes ways without a lock (two CPUs may write one way at once), so each way
//! carries a check word binding its key's hash to its value: a way torn by concurrent writers
//! (or read half-written) fails the check and reads as empty, which costs at most a ring
//! lookup for that packet, never a wrong backend.
use crate::IpBytes;
pub use crate::flow_key::FlowKey;
use crate::hash::mix64;
use crate::table_hash::TableHash;

/// Ways per set. A flow is found by comparing its key with each way of its set.
pub const FLOW_WAYS: usize = 4;

/// Bit 0 of a way's `used`: the flow has proven itself — it sent more than its first packet
/// (TCP: a packet without SYN). A first packet may take only a free or an unproven way, so a
/// flood of first packets (spoofed SYNs) cannot evict established flows.
pub const PROVEN: u32 = 1;

/// Bit 1 of a way's `used`: the direction this table keys has ended (a TCP FIN or RST sent
/// that way; an RST ends both). The way stays findable (the closing handshake and its
/// retransmissions still use it) but no longer protects its flow: its proven bit is cleared
/// and never set again until a new connection takes the key, so the ways of closed
/// connections are the first a new flow takes, before any live one.
pub const CLOSED: u32 = 2;

/// Bit 2 of a REVERSE_FLOWS way's `used`: the backend has answered (a reply used the entry).
/// Among the ways a first packet may take, answered ones go first: a new connection's reply
/// entry is then kept from its SYN to its SYN-ACK even while a SYN flood churns its set
/// (the flood's entries are answered at once by the backend, the newcomer's not yet), and
/// from the client's ACK on it is proven. FLOWS ways never carry it.
pub const ANSWERED: u32 = 4;

/// Bit 2 of a FLOWS way's `used` (REVERSE_FLOWS ways use the bit for [`ANSWERED`]): the NAT
/// flow's reply entry is not in REVERSE_FLOWS. Set by the packet whose reply entry took the
/// entry's way (an eviction); the flow's next packet writes the reply entry again, and the
/// first packet that finds it there clears the mark. An established flow then checks its reply
/// entry only when told it is gone (and once in a long while, for a mark lost: see
/// [`REPLY_CHECK_SHIFT`]), not on every packet after a pause: a second table's set, in another
/// page. Sharing
/// [`ANSWERED`]'s bit, a marked way ranks as an answered one when a first packet looks for a
/// way to take among those that protect nothing: it goes before unmarked ones, which costs its
/// flow nothing it has not lost already.
pub const REPLY_LOST: u32 = 4;

/// Kernel ticks in a reply-check period, as a power of two: 2^16, as long as an idle flow stays
/// protected ([`PROTECT_IDLE_TICKS`]: 262 s at HZ=250, 65 s at HZ=1000). An established NAT
/// flow checks its reply entry when the entry's eviction marked its way [`REPLY_LOST`], and
/// otherwise only on its first packet of each period. That covers a mark lost to a race: the
/// flow's own packet rewriting its stamp on another CPU in the nanoseconds between the marking
/// CPU's read and write. Until then, the flow's replies from a backend of one VIP are still
/// rewritten (`NAT_BACKENDS`); from a backend several VIPs share they are dropped.
pub const REPLY_CHECK_SHIFT: u32 = PROTECT_IDLE_TICKS.trailing_zeros();

/// The flag bits of a way's `used`; the other bits are the kernel tick of its last packet.
pub const STAMP_FLAGS: u32 = PROVEN | CLOSED | ANSWERED;

/// Kernel ticks after which an idle proven flow stops protecting its way: 2^16 ticks (262 s at
/// HZ=250, 65 s at HZ=1000, 655 s at HZ=100). A connection that ended unseen (a backend that
/// died, a client that vanished, a FIN that took another path) then gives its way to new
/// flows like any unproven one; if it was alive after all, its next packet is recorded again
/// as proven (a packet without SYN proves itself).
pub const PROTECT_IDLE_TICKS: u32 = 1 << 16;

/// Whether a way stamped `used` still protects its flow from a first packet at kernel tick
/// `now`: proven, not closed, and not idle for [`PROTECT_IDLE_TICKS`] or more.
#[inline(always)]
pub fn protects(used: u32, now: u32) -> bool {
    used & (PROVEN | CLOSED) == PROVEN && now.wrapping_sub(used & !STAMP_FLAGS) < PROTECT_IDLE_TICKS
}

/// FLOWS value: the backend this flow is pinned to, bound to its VIP and to the generation of
/// the backend id (`Backend::generation`): an entry matches only while the id still holds the
/// backend it was recorded for.
///
/// Layout version 2 (`crate::layout`); version 1 had `vip_id` first (feature `layout-v1-test`
/// builds it, to prove the migration).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowEntry {
    #[cfg(feature = "layout-v1-test")]
    pub vip_id: u32,
    pub backend_id: u32,
    #[cfg(not(feature = "layout-v1-test"))]
    pub vip_id: u32,
    pub generation: u32,
    /// NAT: the table hash of the reply's key (backend → client), so a hit finds the flow's
    /// REVERSE_FLOWS way without hashing; 0 for DSR.
    pub reply_hash: u32,
}

/// `ReverseEntry::vip_id` of a connection opened straight to a NAT backend (not through a
/// VIP) across the balancer: its replies pass untouched. Written by the connection's SYN over
/// any reply entry an earlier VIP connection on the same 4-tuple left behind (the backend
/// cannot hold both connections at once, so that entry is stale).
pub const REVERSE_DIRECT: u32 = u32::MAX;

/// REVERSE_FLOWS value: the VIP a NAT reply must appear to come from.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReverseEntry {
    pub vip_addr: IpBytes,
    pub vip_port: u16,
    pub family: u8,
    pub _pad: u8,
    pub vip_id: u32,
}

impl ReverseEntry {
    /// The key of the flow (client → VIP) whose reply entry this is, keyed `reply`.
    #[inline(always)]
    pub fn forward_key(&self, reply: &FlowKey) -> FlowKey {
        FlowKey::new(reply.dst, self.vip_addr, reply.dst_port, self.vip_port, reply.protocol, reply.family)
    }
}

/// A value stored in a connection table, reduced to one word for the check.
pub trait FlowValue: Copy {
    fn digest(&self) -> u64;
}

impl FlowValue for FlowEntry {
    #[inline(always)]
    fn digest(&self) -> u64 {
        (((self.vip_id as u64) << 32) | self.backend_id as u64)
            ^ (((self.generation as u64) << 32) | self.reply_hash as u64).rotate_left(29)
    }
}

impl FlowValue for ReverseEntry {
    #[inline(always)]
    fn digest(&self) -> u64 {
        // SAFETY: 24 bytes, 8-byte aligned, no implicit padding.
        let w = unsafe { *(self as *const ReverseEntry as *const [u64; 3]) };
        w[0] ^ w[1].rotate_left(21) ^ w[2].rotate_left(42)
    }
}

/// One way of a set.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowSlot<V> {
    pub key: FlowKey,
    pub value: V,
    /// Kernel tick (`jiffies`, low 32 bits, [`STAMP_FLAGS`] cleared) of the flow's last packet,
    /// with [`PROVEN`] in bit 0, [`CLOSED`] in bit 1 and [`ANSWERED`] in bit 2. Eviction takes
    /// the oldest way a new flow may take.
    pub used: u32,
    /// `slot_check(hash of key, value)`; 0 marks a free way.
    pub check: u32,
}

/// One set: the ways a flow of this set's hash may occupy.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowSet<V> {
    pub ways: [FlowSlot<V>; FLOW_WAYS],
}

/// A FLOWS element.
pub type ForwardSet = FlowSet<FlowEntry>;
/// A REVERSE_FLOWS element.
pub type ReverseSet = FlowSet<ReverseEntry>;

/// The check word of a way holding a key of hash `key_hash` and `value`; never 0.
#[inline(always)]
pub fn slot_check<V: FlowValue>(key_hash: u32, value: &V) -> u32 {
    (mix64(value.digest() ^ ((key_hash as u64) << 32 | key_hash as u64)) as u32) | 1
}

impl<V: FlowValue> FlowSlot<V> {
    /// Whether this way holds `key` (of hash `key_hash`), whole.
    #[inline(always)]
    pub fn holds(&self, key: &FlowKey, key_hash: u32) -> bool {
        let check = self.check;
        check != 0 && self.key.same_as(key) && check == slot_check(key_hash, &self.value)
    }
}

impl<V: FlowValue> FlowSet<V> {
    /// The way holding `key`, as userspace finds it (the program refreshes the way's stamp as it
    /// finds it: `table::find`).
    pub fn find(&self, key: &FlowKey, key_hash: u32) -> Option<&FlowSlot<V>> {
        self.ways.iter().find(|way| way.holds(key, key_hash))
    }

    /// The ways holding a whole flow, in a table hashed by `hash`.
    pub fn flows(&self, hash: TableHash) -> impl Iterator<Item = &FlowSlot<V>> {
        self.ways.iter().filter(move |way| way.holds(&way.key, hash.of(&way.key)))
    }
}

/// Number of sets for a table of about `entries` flows: a power of two (the set is the hash's
/// low bits), at least one.
pub const fn flow_sets(entries: u32) -> u32 {
    let sets = entries.div_ceil(FLOW_WAYS as u32);
    if sets <= 1 { 1 } else { sets.next_power_of_two() }
}

/// A flow the program recorded, reported on FLOW_EVENTS when `DataplaneConfig::share_flows` is
/// set: userspace turns the ids into addresses and tells the other balancers (flow sharing).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedFlow {
    pub key: FlowKey,
    pub backend_id: u32,
    pub vip_id: u32,
}

/// Bytes of the FLOW_EVENTS ring buffer: room for about 20,000 flows between two reads.
pub const FLOW_EVENTS_BYTES: u32 = 1 << 20;

crate::user_pod!(FlowEntry, ReverseEntry, ForwardSet, ReverseSet, SharedFlow);
const _: () = assert!(core::mem::size_of::<SharedFlow>() == 48);
const _: () = assert!(core::mem::size_of::<FlowEntry>() == 16);
const _: () = assert!(core::mem::size_of::<ReverseEntry>() == 24);
const _: () = assert!(core::mem::size_of::<FlowSlot<FlowEntry>>() == 64);
const _: () = assert!(core::mem::size_of::<FlowSlot<ReverseEntry>>() == 72);
// The program writes a way's last word (`used` and `check`) last, as one store.
const _: () = assert!(core::mem::offset_of!(FlowSlot<FlowEntry>, used) == 56);
const _: () = assert!(core::mem::offset_of!(FlowSlot<ReverseEntry>, used) == 64);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4_bytes;

    fn key(port: u16) -> FlowKey {
        FlowKey::new(ipv4_bytes([192, 0, 2, 7]), ipv4_bytes([203, 0, 113, 10]), port.to_be(), 80u16.to_be(), 6, 4)
    }

    fn way(k: FlowKey, hash: TableHash, value: FlowEntry) -> FlowSlot<FlowEntry> {
        FlowSlot { key: k, value, used: 0, check: slot_check(hash.of(&k), &value) }
    }

    #[test]
    fn sets_are_a_power_of_two_holding_the_requested_flows() {
        assert_eq!(flow_sets(0), 1);
        assert_eq!(flow_sets(4), 1);
        assert_eq!(flow_sets(4096), 1024);
        assert_eq!(flow_sets(5000), 2048);
        assert_eq!(flow_sets(crate::limits::DEFAULT_FLOWS), 65536);
    }

    #[test]
    fn only_whole_ways_are_found() {
        let seed = TableHash { kind: crate::table_hash::kind::NEWEST, seed: 7 };
        let mut set = ForwardSet::default();
        set.ways[1] = way(key(1000), seed, FlowEntry { backend_id: 3, vip_id: 1, generation: 1, reply_hash: 0 });
        set.ways[2] = way(key(1001), seed, FlowEntry { backend_id: 4, vip_id: 1, generation: 1, reply_hash: 0 });
        // Torn: the value of another write under this key's check word.
        set.ways[2].value.backend_id = 5;
        let h = |port| seed.of(&key(port));
        assert_eq!(set.find(&key(1000), h(1000)).map(|w| w.value.backend_id), Some(3));
        assert!(set.find(&key(1001), h(1001)).is_none(), "a torn way reads as empty");
        assert!(set.find(&key(1002), h(1002)).is_none());
        assert_eq!(set.flows(seed).count(), 1);
        assert_eq!(set.flows(TableHash { seed: 8, ..seed }).count(), 0, "the check binds the table's seed");
        assert_ne!(slot_check(h(1000), &FlowEntry::default()), 0, "0 marks a free way");
    }

    #[test]
    fn only_live_proven_ways_protect_their_flow() {
        let now = 0x1234_5678 & !STAMP_FLAGS;
        assert!(protects(now | PROVEN, now), "proven, just used");
        assert!(!protects(now, now), "unproven");
        assert!(!protects(now | CLOSED, now), "closed");
        assert!(!protects(now | PROVEN | CLOSED, now), "closed wins over proven");
        assert!(protects(now | PROVEN | ANSWERED, now), "answered and proven");
        assert!(!protects(now | ANSWERED, now), "answered only");
        let idle = now.wrapping_sub(PROTECT_IDLE_TICKS);
        assert!(protects((idle + 8) | PROVEN, now), "idle for less than the limit");
        assert!(!protects(idle | PROVEN, now), "idle for the limit");
        // The tick wraps at 2^32: a stamp from just before the wrap is young.
        assert!(protects(!STAMP_FLAGS | PROVEN, 8), "across the wrap");
    }
}
