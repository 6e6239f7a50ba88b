//! The maps (names and layouts from lb_common) and small accessors, so the rest of the program
//! reads as questions and answers rather than map plumbing. Userspace writes every map except
//! FLOWS, REVERSE_FLOWS and the statistics, which only this program writes.
use aya_ebpf::bindings::bpf_fib_lookup;
use aya_ebpf::bindings::xdp_action::XDP_PASS;
use aya_ebpf::helpers::generated::{bpf_jiffies64, bpf_ktime_get_ns};
use aya_ebpf::macros::map;
use aya_ebpf::maps::{Array, HashMap, LruPerCpuHashMap, PerCpuArray, ProgramArray, RingBuf};
use aya_ebpf::programs::XdpContext;
use lb_common::backend::{Backend, NatBackendKey};
use lb_common::config::DataplaneConfig;
use lb_common::flow::{
    FLOW_EVENTS_BYTES, FlowEntry, FlowKey, FlowSlot, ForwardSet, REVERSE_DIRECT, ReverseEntry, ReverseSet, SharedFlow,
    flow_sets,
};
use lb_common::limits::{DEFAULT_FLOWS, DEFAULT_RINGS_ENTRIES, MAX_BACKENDS, MAX_VIPS, PORTS};
use lb_common::nexthop::{BackendHop, NextHop, NextHopKey};
use lb_common::stats::{Counter, Traffic};
use lb_common::vip::{VipInfo, VipKey, index};

use crate::table::{self, Recorded, Tables};

/// The array can be mmap()ed by userspace.
const BPF_F_MMAPABLE: u32 = 1 << 10;

#[map]
static VIPS: HashMap<VipKey, VipInfo> = HashMap::with_max_entries(MAX_VIPS, 0);
/// VipInfo by VIP id (the same entries as VIPS), for connection-table hits.
#[map]
static VIP_INFO: Array<VipInfo> = Array::with_max_entries(MAX_VIPS, 0);
/// VIP ids by a hash of their key (`lb_common::vip::index`): VIPS without its hash lookup.
#[map]
static VIP_INDEX: Array<u32> = Array::with_max_entries(index::SLOTS, 0);
#[map]
static BACKENDS: Array<Backend> = Array::with_max_entries(MAX_BACKENDS, 0);
/// MAX_VIPS rings of `DataplaneConfig::ring_size` slots each; the loader sizes it.
/// Memory-mappable: userspace writes a whole ring with plain stores instead of one syscall a
/// slot (a 65537-slot ring in microseconds, not tens of milliseconds).
#[map]
static RINGS: Array<u32> = Array::with_max_entries(DEFAULT_RINGS_ENTRIES, BPF_F_MMAPABLE);
/// The connection tables (set-associative, see `table`); the loader sizes them. Memory-mappable
/// so userspace reads them without a syscall a set.
#[map]
static FLOWS: Array<ForwardSet> = Array::with_max_entries(flow_sets(DEFAULT_FLOWS), BPF_F_MMAPABLE);
#[map]
static REVERSE_FLOWS: Array<ReverseSet> = Array::with_max_entries(flow_sets(DEFAULT_FLOWS), BPF_F_MMAPABLE);
#[map]
static NEXT_HOPS: LruPerCpuHashMap<NextHopKey, NextHop> =
    LruPerCpuHashMap::with_max_entries(lb_common::limits::NEXT_HOPS, 0);
#[map]
static BACKEND_HOPS: PerCpuArray<BackendHop> = PerCpuArray::with_max_entries(MAX_BACKENDS, 0);
#[map]
static PORT_FLAGS: Array<u32> = Array::with_max_entries(PORTS, 0);
/// NAT backends by the address their replies come from → the VIP id they serve (or
/// `NAT_BACKEND_SHARED`): replies no reply entry names are given a VIP, or dropped, never leaked.
#[map]
static NAT_BACKENDS: HashMap<NatBackendKey, u32> = HashMap::with_max_entries(MAX_BACKENDS, 0);
/// Per CPU: the new-flow budget's current window (`ktime >> 30`), the flows recorded in it,
/// and the kernel tick the window was last checked at.
#[map]
static NEW_FLOW_BUDGET: PerCpuArray<[u64; 3]> = PerCpuArray::with_max_entries(1, 0);
/// The programs lb_ingress hands packets on to (`lb_common::jumps`); the loader fills it.
#[map]
static JUMPS: ProgramArray = ProgramArray::with_max_entries(lb_common::jumps::COUNT, 0);
/// Per CPU: what a route lookup builds, too large for the program's 512 bytes of stack.
#[repr(C)]
pub struct Scratch {
    pub fib: bpf_fib_lookup,
    pub key: NextHopKey,
    /// The next hop's MTU of an IPv6 packet too big for it, for lb_too_big6.
    pub too_big_mtu: u32,
}

#[map]
static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);
#[map]
static CONFIG: Array<DataplaneConfig> = Array::with_max_entries(1, 0);
/// Flows recorded, for userspace to share with the other balancers (only while
/// `DataplaneConfig::share_flows` is set).
#[map]
static FLOW_EVENTS: RingBuf = RingBuf::with_byte_size(FLOW_EVENTS_BYTES, 0);
#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);
#[map]
static VIP_STATS: PerCpuArray<Traffic> = PerCpuArray::with_max_entries(MAX_VIPS, 0);
#[map]
static BACKEND_STATS: PerCpuArray<Traffic> = PerCpuArray::with_max_entries(MAX_BACKENDS, 0);

#[inline(always)]
pub fn count(counter: Counter) {
    add_one(counter_ptr(counter as u32));
}

/// Counts one into a slot from [`counter_ptr`] (none: nothing to count).
#[inline(always)]
pub fn add_one(slot: Option<*mut u64>) {
    if let Some(value) = slot {
        // SAFETY: per-CPU slot, only this CPU writes it while the program runs.
        unsafe { *value += 1 };
    }
}

/// This CPU's count of counter `index` (for `trace`, which compares it across a decision).
#[inline(always)]
pub fn counter_value(index: u32) -> u64 {
    COUNTERS.get(index).copied().unwrap_or(0)
}

/// This CPU's slot of counter `index`, to count into with [`add_one`] (`lb_trace` counts the
/// verdicts it answers; `parse::first_look` looks the non-VIP pass's slot up early).
#[inline(always)]
pub fn counter_ptr(index: u32) -> Option<*mut u64> {
    COUNTERS.get_ptr_mut(index)
}

#[inline(always)]
fn add_traffic(map: &PerCpuArray<Traffic>, index: u32, bytes: u64) {
    if let Some(value) = map.get_ptr_mut(index) {
        // SAFETY: per-CPU slot.
        unsafe {
            (*value).packets += 1;
            (*value).bytes += bytes;
        }
    }
}

/// Counts a packet forwarded for VIP `vip_id` to backend `backend_id`.
#[inline(always)]
pub fn count_traffic(vip_id: u32, backend_id: u32, bytes: u64) {
    add_traffic(&VIP_STATS, vip_id, bytes);
    add_traffic(&BACKEND_STATS, backend_id, bytes);
}

/// Hands the packet to program `index` of JUMPS, which counts and answers it. Returns only when
/// that program is missing.
///
/// The helper is called from inline assembly rather than through `ProgramArray::tail_call`:
/// LLVM merges the helper calls of two jumps into one call whose index comes from either path
/// (lb_ingress's jumps to lb_ingress_v6 and lb_icmp_errors were one), and the verifier makes a
/// tail call a direct jump only where its index is one constant; the merged one became an
/// indirect jump through a retpoline, for every IPv6 packet. This LLVM does not merge inline
/// assembly so (nothing but the benchmark would show it if a later one did).
#[inline(always)]
pub fn jump(ctx: &XdpContext, index: u32) -> crate::verdict::Verdict {
    // SAFETY: bpf_tail_call (helper 12) on our own context and JUMPS; it clobbers r0-r5 as any
    // helper call, and a tail call that fails returns and changes nothing.
    unsafe {
        core::arch::asm!(
            "call 12",
            inlateout("r1") ctx.ctx => _,
            inlateout("r2") &JUMPS as *const ProgramArray => _,
            inlateout("r3") index as u64 => _,
            lateout("r0") _,
            lateout("r4") _,
            lateout("r5") _,
        );
    }
    (XDP_PASS, Counter::PassJumpFailed)
}

/// This CPU's scratch space.
#[inline(always)]
pub fn scratch() -> Option<*mut Scratch> {
    SCRATCH.get_ptr_mut(0)
}

#[inline(always)]
pub fn port_flags(port: u16) -> u32 {
    PORT_FLAGS.get(port as u32).copied().unwrap_or(0)
}

/// The VIP of `key`, from VIPS (a hash lookup).
#[inline(always)]
pub fn vip(key: &VipKey) -> Option<&'static VipInfo> {
    // SAFETY: the value is only read; userspace replaces entries whole.
    unsafe { VIPS.get(key) }
}

/// As [`vip`], through VIP_INDEX and VIP_INFO when the index names the VIP: two array lookups
/// instead of VIPS's hash lookup (about 45 ns here, most of what finding the VIP of a new
/// flow cost). The index is only a hint, checked against VIP_INFO's key. lb_ingress_v6 keeps
/// to [`vip`]: inlined, the index's lookups took its stack past 512 bytes; as a function of
/// their own, its verification past the verifier's million instructions.
#[inline(always)]
pub fn vip_indexed(key: &VipKey) -> Option<&'static VipInfo> {
    let indexed = VIP_INDEX.get(index::slot(key)).and_then(|entry| index::id(*entry)).and_then(vip_info);
    match indexed {
        Some(vip) if vip.key == *key => Some(vip),
        _ => vip(key),
    }
}

#[inline(always)]
pub fn vip_info(id: u32) -> Option<&'static VipInfo> {
    VIP_INFO.get(id)
}

#[inline(always)]
pub fn config() -> Option<&'static DataplaneConfig> {
    CONFIG.get(0)
}

#[inline(always)]
pub fn backend(id: u32) -> Option<&'static Backend> {
    BACKENDS.get(id)
}

#[inline(always)]
pub fn ring_slot(index: u32) -> Option<u32> {
    RINGS.get(index).copied()
}

#[inline(always)]
pub fn tables() -> Option<Tables> {
    Tables::new(config())
}

/// The flow's way, and whether a NAT flow's packet checks its reply entry
/// (`table::reply_check_due`).
#[inline(always)]
pub fn flow(key: &FlowKey, hash: u32, t: &Tables) -> Option<(*mut FlowSlot<FlowEntry>, bool)> {
    table::find_stamped(&FLOWS, key, hash, t).map(|(slot, used)| (slot, table::reply_check_due(used, t)))
}

#[inline(always)]
pub fn record_flow(key: &FlowKey, hash: u32, entry: &FlowEntry, proven: bool, t: &Tables) -> Recorded {
    let recorded = table::record(&FLOWS, (key, hash, entry), proven, t, |_| {});
    if t.share_flows && !matches!(recorded, Recorded::Protected | Recorded::Failed) {
        let event = SharedFlow { key: *key, backend_id: entry.backend_id, vip_id: entry.vip_id };
        if FLOW_EVENTS.output::<SharedFlow>(&event, 0).is_err() {
            // Userspace is behind: this flow is not shared (its node still serves it).
            count(Counter::FlowShareOverflow);
        }
    }
    recorded
}

/// Reads the first way's check word of the FLOWS set of `hash`, and nothing else (`floor`).
#[inline(always)]
pub fn read_flow_set(hash: u32, t: &Tables) {
    table::read_set(&FLOWS, hash, t);
}

/// The way of a NAT reply's entry (keyed backend → client), if the table holds it.
#[inline(always)]
pub fn reverse_way(key: &FlowKey, hash: u32, t: &Tables) -> Option<*mut FlowSlot<ReverseEntry>> {
    table::find(&REVERSE_FLOWS, key, hash, t)
}

/// Records a NAT reply's entry. Not recorded (for a first packet, a set whose every way
/// protects a live proven flow), replies still find their VIP through NAT_BACKENDS when the
/// backend serves one VIP.
#[inline(always)]
pub fn record_reverse_flow(key: &FlowKey, hash: u32, entry: &ReverseEntry, proven: bool, t: &Tables) {
    let _ = table::record(&REVERSE_FLOWS, (key, hash, entry), proven, t, |evicted| reply_lost(evicted, t));
}

/// A reply entry is being evicted: its flow's way is marked, so that the flow's next packet
/// writes the entry again. A way read torn names no flow the table holds, and marks nothing.
#[inline(always)]
fn reply_lost(way: *const FlowSlot<ReverseEntry>, t: &Tables) {
    // SAFETY: a valid map value pointer.
    let (reply, reverse) = unsafe { ((*way).key, (*way).value) };
    if reverse.vip_id == REVERSE_DIRECT {
        return;
    }
    let forward = reverse.forward_key(&reply);
    table::mark_reply_lost(&FLOWS, &forward, t.hash(&forward), t);
}

/// The VIP id a NAT backend's replies come from (`NAT_BACKEND_SHARED` when several), if the
/// address is a NAT backend's.
#[inline(always)]
pub fn nat_backend(key: &NatBackendKey) -> Option<u32> {
    // SAFETY: the value is only read.
    unsafe { NAT_BACKENDS.get(key) }.copied()
}

/// Takes one new flow from this CPU's budget of `limit` a window (2^30 ns, about a second;
/// 0: no limit). False when the window's budget is spent.
///
/// The clock is read once per kernel tick on each CPU (a flood's SYNs come many to a tick):
/// `bpf_ktime_get_ns` cost about a tenth of a new flow here (a `perf` profile of `bench
/// dataplane`), where the tick is one load. Within a tick (1 to 10 ms) the window is taken as
/// unchanged: a window may run one tick long.
#[inline(always)]
pub fn take_new_flow(limit: u32) -> bool {
    if limit == 0 {
        return true;
    }
    let Some(budget) = NEW_FLOW_BUDGET.get_ptr_mut(0) else {
        return true;
    };
    // SAFETY: plain helper call, which the kernel inlines as one load of `jiffies`.
    let tick = unsafe { bpf_jiffies64() };
    // SAFETY: this CPU's own slot; a plain helper call.
    unsafe {
        let [window, used, checked_at] = &mut *budget;
        if *checked_at != tick {
            *checked_at = tick;
            let now = bpf_ktime_get_ns() >> 30;
            if *window != now {
                *window = now;
                *used = 0;
            }
        }
        if *used >= limit as u64 {
            return false;
        }
        *used += 1;
    }
    true
}

/// Where a cached next hop lives.
#[derive(Clone, Copy)]
pub enum HopCache {
    /// BACKEND_HOPS[id]: packets to backend `id`.
    Backend(u32),
    /// NEXT_HOPS, by key: replies to clients.
    Address,
}

/// This CPU's cached answer for packets to backend `id`, and the lookup it answers.
#[inline(always)]
pub fn backend_hop(id: u32) -> Option<&'static BackendHop> {
    BACKEND_HOPS.get(id)
}

/// This CPU's cached answer for `key` (replies to clients).
#[inline(always)]
pub fn client_hop(key: &NextHopKey) -> Option<&'static NextHop> {
    // SAFETY: this CPU's own copy of the value.
    unsafe { NEXT_HOPS.get(key) }
}

#[inline(always)]
pub fn remember_next_hop(cache: HopCache, key: &NextHopKey, hop: &NextHop) {
    match cache {
        HopCache::Backend(id) => {
            if let Some(slot) = BACKEND_HOPS.get_ptr_mut(id) {
                // SAFETY: this CPU's own slot.
                unsafe {
                    (*slot).key = *key;
                    (*slot).hop = *hop;
                }
            }
        }
        // A lost entry only costs a lookup on the next packet.
        HopCache::Address => {
            let _ = NEXT_HOPS.insert(key, hop, 0);
        }
    }
}
