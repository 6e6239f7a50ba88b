//! Tracing the balancer's decisions (`lb-ctl trace`): the filters userspace sets in TRACE, and
//! the fixed-size record the program puts on TRACE_EVENTS for every packet a filter matches.
//!
//! Off costs nothing measurable: packets that are neither a VIP's nor a NAT reply never look at
//! TRACE (the non-VIP path is unchanged), and a VIP packet or reply reads one word of it
//! (`TraceControl::active`) and goes on when it is 0. A matching packet is recorded only while
//! its CPU's budget (`TraceControl::budget` records a window of 2^30 ns) lasts; past it, and
//! when the ring buffer is full, the record is counted in TRACE_STATS instead.
use crate::IpBytes;
use crate::flow_key::FlowKey;

/// Traces that may run at once (filter slots in [`TraceControl`]).
pub const MAX_TRACES: usize = 4;
/// Size of the TRACE_EVENTS ring buffer (a power of two, a multiple of the page size).
pub const TRACE_EVENTS_BYTES: u32 = 1 << 20;
/// Records each CPU may put on the ring a window (2^30 ns, about a second), unless the trace
/// asks for fewer: a trace of a busy VIP cannot flood the daemon.
pub const DEFAULT_TRACE_BUDGET: u32 = 1000;
/// Bytes of the packet as the program leaves it (headers after the rewrite) kept in a record.
pub const TRACE_CAPTURE: usize = 96;
/// "None" for the id fields of records and filters.
pub const TRACE_NONE: u32 = u32::MAX;

/// TRACE_STATS indices (a per-CPU array of u64).
pub mod trace_stats {
    /// Records put on the ring.
    pub const RECORDED: u32 = 0;
    /// Matching packets not recorded: their CPU's budget for the window was spent.
    pub const OVER_BUDGET: u32 = 1;
    /// Matching packets not recorded: the ring was full (userspace behind).
    pub const RING_FULL: u32 = 2;
    pub const COUNT: u32 = 3;
}

/// What kind of packet a record is about.
pub mod trace_kind {
    /// A packet to a VIP (the key is client → VIP).
    pub const VIP: u8 = 1;
    /// A NAT backend's reply (the key is backend → client).
    pub const REPLY: u8 = 2;
}

/// One trace's filter: a packet matches when every field that is set matches.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceFilter {
    /// The client's address (source of VIP packets, destination of replies), masked by
    /// `client_mask`; `client_family` 0: any client.
    pub client: IpBytes,
    pub client_mask: IpBytes,
    /// VIP id, or TRACE_NONE for any.
    pub vip_id: u32,
    /// Backend id, or TRACE_NONE for any.
    pub backend_id: u32,
    /// Bit `1 << action` for each XDP action wanted (XDP_DROP 1, PASS 2, TX 3, REDIRECT 4);
    /// 0: any.
    pub actions: u32,
    pub client_family: u8,
    pub _pad: [u8; 3],
}

impl TraceFilter {
    /// The filter that matches every packet.
    pub const ANY: TraceFilter = TraceFilter {
        client: [0; 16],
        client_mask: [0; 16],
        vip_id: TRACE_NONE,
        backend_id: TRACE_NONE,
        actions: 0,
        client_family: 0,
        _pad: [0; 3],
    };

    /// Whether a packet of VIP `vip_id` from (or to) `client`, sent to `backend_id` with
    /// `action`, matches.
    #[inline(always)]
    pub fn matches(&self, vip_id: u32, backend_id: u32, action: u32, family: u8, client: &IpBytes) -> bool {
        if self.vip_id != TRACE_NONE && self.vip_id != vip_id {
            return false;
        }
        if self.backend_id != TRACE_NONE && self.backend_id != backend_id {
            return false;
        }
        if self.actions != 0 && (action >= 32 || self.actions & (1 << action) == 0) {
            return false;
        }
        if self.client_family == 0 {
            return true;
        }
        if self.client_family != family {
            return false;
        }
        // Word by word: byte loops become memcmp calls the program cannot make.
        let words = |a: &IpBytes| -> [u32; 4] {
            // SAFETY: 16 bytes read as four u32s (unaligned reads).
            unsafe { core::ptr::read_unaligned(a as *const IpBytes as *const [u32; 4]) }
        };
        let (c, m, want) = (words(client), words(&self.client_mask), words(&self.client));
        (c[0] & m[0]) == want[0] && (c[1] & m[1]) == want[1] && (c[2] & m[2]) == want[2] && (c[3] & m[3]) == want[3]
    }
}

/// TRACE's one entry: which filter slots are in use (bit i: `filters[i]`), and the per-CPU
/// budget of records a window.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceControl {
    /// 0: tracing off (the only field an untraced VIP packet reads).
    pub active: u32,
    /// Records each CPU may put on the ring a window of 2^30 ns.
    pub budget: u32,
    pub filters: [TraceFilter; MAX_TRACES],
}

impl Default for TraceControl {
    fn default() -> Self {
        TraceControl { active: 0, budget: DEFAULT_TRACE_BUDGET, filters: [TraceFilter::ANY; MAX_TRACES] }
    }
}

/// One traced packet, as the program decided it.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug)]
pub struct TraceRecord {
    /// `bpf_ktime_get_ns` (monotonic, since boot).
    pub time_ns: u64,
    /// The counters this packet counted, bit `1 << Counter as u32` (the verdict's, and the
    /// events on the way: flow_hit, flow_new, nat_reply, nexthop_lookup, ...).
    pub counted: u64,
    /// The packet's flow as it arrived: client → VIP ([`trace_kind::VIP`]) or backend →
    /// client ([`trace_kind::REPLY`]).
    pub key: FlowKey,
    pub cpu: u32,
    /// The XDP action returned.
    pub action: u32,
    /// The verdict's counter (a `Counter` index).
    pub reason: u32,
    pub vip_id: u32,
    /// The backend chosen (TRACE_NONE: none, or a reply).
    pub backend_id: u32,
    /// The flow's slot in its VIP's ring (TRACE_NONE for replies).
    pub ring_slot: u32,
    /// Bit i: filter slot i matched.
    pub matched: u32,
    /// The interface the packet arrived on.
    pub ifindex: u32,
    pub kind: u8,
    /// The TCP flags of the packet as it arrived (0 for UDP).
    pub tcp_flags: u8,
    /// Bytes of `packet` filled.
    pub captured: u16,
    pub _pad: u32,
    /// The packet's first bytes as the program leaves it: the rewrite (NAT address, the
    /// encapsulation, the next hop's MAC) is read from here.
    pub packet: [u8; TRACE_CAPTURE],
}

crate::user_pod!(TraceFilter, TraceControl, TraceRecord);
const _: () = assert!(core::mem::size_of::<TraceRecord>().is_multiple_of(8));

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{family, ipv4_bytes};

    #[test]
    fn filter_fields_each_narrow_the_match() {
        let client = ipv4_bytes([192, 0, 2, 7]);
        assert!(TraceFilter::ANY.matches(3, 9, 3, family::IPV4, &client));
        let by_vip = TraceFilter { vip_id: 3, ..TraceFilter::ANY };
        assert!(by_vip.matches(3, 9, 3, family::IPV4, &client));
        assert!(!by_vip.matches(4, 9, 3, family::IPV4, &client));
        let by_backend = TraceFilter { backend_id: 9, ..TraceFilter::ANY };
        assert!(!by_backend.matches(3, 8, 3, family::IPV4, &client));
        let drops = TraceFilter { actions: 1 << 1, ..TraceFilter::ANY };
        assert!(drops.matches(3, 9, 1, family::IPV4, &client));
        assert!(!drops.matches(3, 9, 3, family::IPV4, &client));
        let net = TraceFilter {
            client: ipv4_bytes([192, 0, 2, 0]),
            client_mask: ipv4_bytes([255, 255, 255, 0]),
            client_family: family::IPV4,
            ..TraceFilter::ANY
        };
        assert!(net.matches(3, 9, 3, family::IPV4, &client));
        assert!(!net.matches(3, 9, 3, family::IPV4, &ipv4_bytes([192, 0, 3, 7])));
        assert!(!net.matches(3, 9, 3, family::IPV6, &client));
    }
}
