//! `lb-ctl trace`: a record on TRACE_EVENTS for every VIP packet and NAT reply a filter in
//! TRACE matches (`lb_common::trace`).
//!
//! The hooks are two calls around a decision: [`start`] before it, [`done`] with its verdict.
//! Off (TRACE's `active` is 0) they cost one array read and a branch, and only on the VIP and
//! reply paths: packets that pass as not ours never reach them. On, `start` notes this CPU's
//! counters, and `done` tells from them what the packet counted (flow hit, new flow recorded or
//! not, reply entry restored, next hop looked up ...), so the decision code itself carries no
//! trace plumbing. The work of a traced packet is in functions of their own (not inlined), out
//! of the untraced packet's instructions.
use aya_ebpf::helpers::generated::{bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_xdp_load_bytes};
use aya_ebpf::macros::{map, xdp};
use aya_ebpf::maps::{Array, PerCpuArray, RingBuf};
use aya_ebpf::programs::XdpContext;
use lb_common::flow::FlowKey;
use lb_common::hash::ring_slot;
use lb_common::stats::Counter;
use lb_common::trace::{
    MAX_TRACES, TRACE_CAPTURE, TRACE_EVENTS_BYTES, TRACE_NONE, TraceControl, TraceRecord, trace_kind, trace_stats,
};
use lb_common::vip::VipInfo;
use lb_ebpf::packet::packet_len;

use crate::maps;
use crate::parse::TcpFlags;
use crate::verdict::Verdict;

/// The filters (one entry); userspace writes it when a trace starts or ends.
#[map]
static TRACE: Array<TraceControl> = Array::with_max_entries(1, 0);
#[map]
static TRACE_EVENTS: RingBuf = RingBuf::with_byte_size(TRACE_EVENTS_BYTES, 0);
/// `trace_stats`: records made, and matching packets not recorded (budget, ring full).
#[map]
static TRACE_STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(trace_stats::COUNT, 0);

/// The event counters a decision may move (the verdict's own counter is recorded apart): the
/// ones [`start`] notes and `lb_trace` compares. Listed rather than looped over: each is a map
/// lookup, and the verifier walks this code once for every path that reaches it.
const EVENTS: [Counter; 13] = [
    Counter::FlowHit,
    Counter::FlowNew,
    Counter::FlowRerouted,
    Counter::FlowTableFull,
    Counter::FlowUnrecorded,
    Counter::FlowSetProven,
    Counter::NatReply,
    Counter::NatReplyByBackend,
    Counter::ReverseRestored,
    Counter::IcmpToBackend,
    Counter::NexthopLookup,
    Counter::DirectToBackend,
    Counter::FlowShareOverflow,
];

/// Per CPU: what the hooks hand `lb_trace` (the decided packet), the event counters before the
/// decision, and the budget's window (`ktime >> 30`) and records in it.
#[repr(C)]
pub struct Scratch {
    key: FlowKey,
    counters: [u64; EVENTS.len()],
    window: u64,
    used: u64,
    vip_id: u32,
    action: u32,
    reason: u32,
    kind: u8,
    tcp_flags: u8,
}

#[map]
static TRACE_SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);

/// While some trace runs: notes in this CPU's scratch the packet's TCP flags and the event
/// counters before the decision. One array read when nobody traces. Nothing is carried from
/// here to [`done`], which looks again: a value live across the decision would double the
/// paths the verifier walks through it.
#[inline(always)]
pub fn start(tcp: &TcpFlags) {
    let Some(scratch) = tracing() else { return };
    // SAFETY: this CPU's own slot; the flags pointer is inside the TCP header the parser
    // checked (null for UDP).
    unsafe {
        (*scratch).tcp_flags = if tcp.0.is_null() { 0 } else { *tcp.0 };
        for (i, c) in EVENTS.iter().enumerate() {
            (*scratch).counters[i] = maps::counter_value(*c as u32);
        }
    }
}

/// This CPU's scratch, while some trace runs.
#[inline(always)]
fn tracing() -> Option<*mut Scratch> {
    TRACE.get(0).filter(|c| c.active != 0)?;
    TRACE_SCRATCH.get_ptr_mut(0)
}

/// A decided packet: its flow as it arrived, its VIP (`TRACE_NONE`: unknown), its kind.
pub struct Decided<'a> {
    pub key: &'a FlowKey,
    pub vip_id: u32,
    pub kind: u8,
    pub verdict: Verdict,
}

/// After the decision, while a trace runs: hands the packet to `lb_trace` (a tail call: the
/// recording is a program of its own, verified once rather than on every path that decides),
/// which counts the verdict and answers it. Returns only if `lb_trace` is missing.
#[inline(always)]
pub fn done(ctx: &XdpContext, decided: &Decided) {
    let Some(scratch) = tracing() else { return };
    // SAFETY: this CPU's own slot.
    unsafe {
        (*scratch).key = *decided.key;
        (*scratch).vip_id = decided.vip_id;
        (*scratch).kind = decided.kind;
        (*scratch).action = decided.verdict.0;
        (*scratch).reason = decided.verdict.1 as u32;
    }
    maps::jump(ctx, lb_common::jumps::TRACE);
}

/// The trace recorder: the packet `done` noted, recorded if a filter matches and this CPU's
/// budget allows; its verdict counted and returned.
#[xdp]
pub fn lb_trace(ctx: XdpContext) -> u32 {
    let Some(scratch) = TRACE_SCRATCH.get_ptr_mut(0) else { return aya_ebpf::bindings::xdp_action::XDP_PASS };
    // SAFETY: this CPU's own slot, filled by `done` just before the jump.
    let (action, reason) = unsafe { ((*scratch).action, (*scratch).reason) };
    if let Some(control) = TRACE.get(0) {
        record(&ctx, control, scratch, reason);
    }
    maps::add_one(maps::counter_ptr(reason));
    action
}

#[inline(always)]
fn record(ctx: &XdpContext, control: &TraceControl, scratch: *mut Scratch, reason: u32) {
    // SAFETY: this CPU's own slot, filled by `done` just before the jump.
    let (key, vip_id, kind, action) =
        unsafe { ((*scratch).key, (*scratch).vip_id, (*scratch).kind, (*scratch).action) };
    // The verdict's own counter is counted after this.
    let mut counted = 1u64 << (reason & 63);
    for (i, c) in EVENTS.iter().enumerate() {
        // SAFETY: this CPU's own slot.
        let moved = maps::counter_value(*c as u32) ^ unsafe { (*scratch).counters[i] };
        // Without a branch: one per counter would double the verifier's paths each time.
        counted |= ((moved | moved.wrapping_neg()) >> 63) << (*c as u32);
    }
    let vip = maps::vip_info(vip_id);
    let (backend_id, slot) = match vip {
        Some(vip) if kind == trace_kind::VIP => backend_of(vip, &key, counted, reason),
        // A reply: its backend is the key's source.
        _ => (TRACE_NONE, TRACE_NONE),
    };
    let vip_id = if vip.is_some() { vip_id } else { TRACE_NONE };
    let client = if kind == trace_kind::REPLY { &key.dst } else { &key.src };
    let mut matched = 0u32;
    for i in 0..MAX_TRACES {
        let hit = control.active & (1 << i) != 0
            && control.filters[i].matches(vip_id, backend_id, action, key.family, client);
        matched |= (hit as u32) << i;
    }
    if matched == 0 {
        return;
    }
    // SAFETY: this CPU's own slot; a plain helper call.
    let within_budget = unsafe {
        let window = bpf_ktime_get_ns() >> 30;
        if (*scratch).window != window {
            (*scratch).window = window;
            (*scratch).used = 0;
        }
        (*scratch).used += 1;
        (*scratch).used <= control.budget as u64
    };
    if !within_budget {
        stat(trace_stats::OVER_BUDGET);
        return;
    }
    let Some(mut entry) = TRACE_EVENTS.reserve::<TraceRecord>(0) else {
        stat(trace_stats::RING_FULL);
        return;
    };
    // The helper wants a size the verifier knows is not zero: a few constant sizes, the
    // largest the packet holds (every traced packet has a whole L4 header: 42 bytes and more).
    let len = packet_len(ctx);
    let captured = match len {
        96.. => TRACE_CAPTURE as u32,
        64..=95 => 64,
        42..=63 => 42,
        _ => 14,
    };
    let rec = entry.as_mut_ptr();
    // SAFETY: a reserved record, written field by field before it is submitted; the packet
    // bytes are copied by the helper, within the buffer (and the packet).
    unsafe {
        (*rec).time_ns = bpf_ktime_get_ns();
        (*rec).counted = counted;
        (*rec).key = key;
        (*rec).cpu = bpf_get_smp_processor_id();
        (*rec).action = action;
        (*rec).reason = reason;
        (*rec).vip_id = vip_id;
        (*rec).backend_id = backend_id;
        (*rec).ring_slot = slot;
        (*rec).matched = matched;
        (*rec).ifindex = (*ctx.ctx).ingress_ifindex;
        (*rec).kind = kind;
        (*rec).tcp_flags = (*scratch).tcp_flags;
        (*rec)._pad = 0;
        let buf = (*rec).packet.as_mut_ptr() as *mut _;
        let copied = match captured {
            96 => bpf_xdp_load_bytes(ctx.ctx, 0, buf, 96),
            64 => bpf_xdp_load_bytes(ctx.ctx, 0, buf, 64),
            42 => bpf_xdp_load_bytes(ctx.ctx, 0, buf, 42),
            _ => bpf_xdp_load_bytes(ctx.ctx, 0, buf, 14),
        } == 0;
        (*rec).captured = if copied { captured as u16 } else { 0 };
    }
    entry.submit(0);
    stat(trace_stats::RECORDED);
}

/// The backend a VIP packet went to, and the flow's ring slot: the connection table's entry
/// when the packet followed (or made) one, else the ring's.
#[inline(always)]
fn backend_of(vip: &VipInfo, key: &FlowKey, counted: u64, reason: u32) -> (u32, u32) {
    let Some(t) = maps::tables() else { return (TRACE_NONE, TRACE_NONE) };
    let slot = ring_slot(vip.hash, key, t.ring_seed, t.ring_size);
    let no_backend = [Counter::DropNoBackend, Counter::PassNotConfigured, Counter::PassTtlExpired];
    if no_backend.iter().any(|c| *c as u32 == reason) {
        return (TRACE_NONE, slot);
    }
    let unrecorded = (1u64 << Counter::FlowUnrecorded as u32) | (1u64 << Counter::FlowSetProven as u32);
    if counted & unrecorded == 0
        && let Some((way, _)) = maps::flow(key, t.hash(key), &t)
    {
        // SAFETY: a valid map value pointer.
        let entry = unsafe { (*way).value };
        if entry.vip_id == vip.id {
            return (entry.backend_id, slot);
        }
    }
    let backend = maps::ring_slot(vip.id.wrapping_mul(t.ring_size).wrapping_add(slot)).unwrap_or(TRACE_NONE);
    (backend, slot)
}

#[inline(always)]
fn stat(index: u32) {
    if let Some(value) = TRACE_STATS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot.
        unsafe { *value += 1 };
    }
}
