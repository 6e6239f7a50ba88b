//! Named counters. COUNTERS is a per-CPU array indexed by [`Counter`]; VIP_STATS and
//! BACKEND_STATS are per-CPU arrays of [`Traffic`] indexed by VIP id and backend id.

/// Packets and bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    pub packets: u64,
    pub bytes: u64,
}

crate::user_pod!(Traffic);

macro_rules! counters {
    ($( $(#[doc = $doc:literal])* $variant:ident = $name:literal, )*) => {
        /// Why a packet took the path it took. Every verdict the balancer returns is counted
        /// under exactly one `Pass*`, `Drop*` or `Forward*` counter; the others (`Flow*`) count
        /// events on the way.
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Counter {
            $( $(#[doc = $doc])* $variant, )*
        }

        impl Counter {
            /// Every counter, in index order.
            pub const ALL: &'static [Counter] = &[$(Counter::$variant,)*];
            /// Number of counters: the size of the COUNTERS map.
            pub const COUNT: u32 = Counter::ALL.len() as u32;

            /// The stable name shown by `lb-ctl stats` and used in metrics.
            pub const fn name(self) -> &'static str {
                match self { $(Counter::$variant => $name,)* }
            }
        }
    };
}

counters! {
    /// Neither IPv4 nor IPv6 (ARP, LLDP, ...): passed untouched.
    PassNotIp = "pass_not_ip",
    /// IPv4 or IPv6 but not addressed to a VIP (or a NAT reply): passed untouched. Neighbour
    /// discovery, router advertisements and every other ICMPv6 message but errors about VIP
    /// flows are counted here.
    PassNotVip = "pass_not_vip",
    /// IPv4 fragment, or IPv6 packet with a fragment header: no L4 header to match on (or not
    /// the whole datagram), passed untouched for the stack to handle.
    PassFragment = "pass_fragment",
    /// IPv4 header with options; IPv6 packet with more extension headers than the program
    /// walks (`parse6::MAX_EXTENSION_HEADERS`), or with a routing header that still has
    /// segments left (the destination is not yet the final one): passed untouched.
    PassIpOptions = "pass_ip_options",
    /// Truncated or malformed L2/L3/L4 header: passed untouched (the stack drops it).
    PassMalformed = "pass_malformed",
    /// VIP packet whose TTL (IPv6: hop limit) would expire here: passed to the stack, which
    /// answers with ICMP.
    PassTtlExpired = "pass_ttl_expired",
    /// Rewritten packet whose next hop has no neighbour entry yet: passed to the stack,
    /// which resolves it and forwards the packet.
    PassNoNeighbour = "pass_no_neighbour",
    /// VIP packet before the data plane has been configured (ring size 0).
    PassNotConfigured = "pass_not_configured",
    /// VIP packet whose ring slot is empty: the VIP has no usable backend.
    DropNoBackend = "drop_no_backend",
    /// No route to the backend (or the client, for a reply).
    DropNoRoute = "drop_no_route",
    /// DSR: the backend's MAC is not known yet. (Health checks from the balancer keep backend
    /// neighbour entries resolved; an encapsulated packet cannot be handed to the stack.)
    DropNoNeighbour = "drop_no_neighbour",
    /// A NAT backend's packet to a host elsewhere that no reply entry names, from a backend
    /// several VIPs share: which VIP it must come from is unknown, and it must not leave with
    /// the backend's own address.
    DropReplyNoFlow = "drop_reply_no_flow",
    /// Larger than the next hop's MTU (NAT; DSR once encapsulated) and DF clear: ours to drop,
    /// as a router would fragment it and we do not.
    DropTooBig = "drop_too_big",
    /// The packet could not be grown for encapsulation.
    DropEncapFailed = "drop_encap_failed",
    /// Sent back out of the interface it came in on (XDP_TX).
    ForwardTx = "forward_tx",
    /// Redirected to another interface (XDP_REDIRECT).
    ForwardRedirect = "forward_redirect",
    /// Larger than the next hop's MTU (NAT; DSR once encapsulated), sent with DF: answered
    /// with ICMP "fragmentation needed" (IPv6: ICMPv6 "packet too big", sent whatever DF
    /// says as IPv6 routers never fragment) with the usable MTU, so the sender lowers its path MTU
    /// instead of losing every full-size packet.
    ForwardIcmpTooBig = "forward_icmp_too_big",
    /// Flow found in the connection table.
    FlowHit = "flow_hit",
    /// New flow placed on the ring and recorded (also a TCP SYN whose 5-tuple an earlier
    /// connection left in the table).
    FlowNew = "flow_new",
    /// Flow whose backend was removed (or whose backend id now holds another backend),
    /// placed again on the ring.
    FlowRerouted = "flow_rerouted",
    /// New flow whose set of the connection table was full: it took the place of the set's
    /// least recently used flow (which the ring places again if it sends more packets).
    FlowTableFull = "flow_table_full",
    /// NAT reply rewritten back to the VIP.
    NatReply = "nat_reply",
    /// NAT reply that no reply entry named, rewritten back to the one VIP its backend serves.
    NatReplyByBackend = "nat_reply_by_backend",
    /// An established NAT flow's reply entry was missing (evicted): written again.
    ReverseRestored = "reverse_flow_restored",
    /// New flow placed by the ring but not recorded: this CPU's new-flow budget
    /// (`DataplaneConfig::new_flow_budget`) for the current second is spent.
    FlowUnrecorded = "new_flow_unrecorded",
    /// New flow placed by the ring but not recorded: every way of its set holds a flow that
    /// proved itself, which a first packet may not evict.
    FlowSetProven = "new_flow_set_proven",
    /// ICMP error about a VIP flow (addressed to the VIP, quoting a packet the flow sent) sent
    /// on to the flow's backend.
    IcmpToBackend = "icmp_to_backend",
    /// Next hop looked up in the kernel's FIB: the per-CPU cache had no current answer.
    NexthopLookup = "nexthop_lookup",
    /// A TCP connection opened straight to a NAT backend's address and port (not through a
    /// VIP) across the balancer: its replies are marked to pass untouched.
    DirectToBackend = "direct_to_backend",
    /// DSR by MAC rewrite (`dsr-l2`): the route to the backend goes through a gateway, so the
    /// backend is not on this segment and its MAC cannot be used.
    DropNotAdjacent = "drop_backend_not_adjacent",
    /// Flow sharing on, but FLOW_EVENTS was full: a recorded flow not reported to userspace
    /// (so not shared with the other balancers).
    FlowShareOverflow = "flow_share_overflow",
    /// An IPv6 frame or ICMP error whose program (JUMPS, filled by the loader) is missing:
    /// passed untouched.
    PassJumpFailed = "pass_jump_failed",
    /// QUIC VIP: a long-header packet (Initial, 0-RTT, Handshake, Retry): its connection ID
    /// is not yet the server's, so the connection table and ring place it.
    QuicLongHeader = "quic_long_header",
    /// QUIC VIP: a short-header packet whose connection ID names a server of the VIP that is
    /// healthy and in the ring: sent to that backend, whatever the client's address.
    QuicRouted = "quic_routed_by_server_id",
    /// QUIC VIP: a short-header packet whose server id no backend of the VIP holds, or whose
    /// backend is drained or down: placed by the connection table and ring.
    QuicUnknownServer = "quic_unknown_server_id",
    /// QUIC VIP: a short-header packet whose connection ID names no server (CID version 0, or
    /// server id 0): placed by the connection table and ring.
    QuicNoServerId = "quic_no_server_id",
    /// QUIC VIP: a UDP datagram too short for a QUIC header with a connection ID the
    /// balancer can read (`lb_common::quic::SHORT_HEADER_BYTES`), or empty: placed by the
    /// connection table and ring, as any UDP.
    QuicTruncated = "quic_truncated",
    /// ICMP error about a NAT flow's packet as sent on to its backend (the backend's "port
    /// unreachable", a router's "fragmentation needed" on the backend's path) sent to the
    /// client as if about the packet the client sent: the backend replaced by the VIP in the
    /// quote, and in the source when the backend sent it.
    IcmpToClient = "icmp_to_client",
}

/// Counters of the decapsulation program (DECAP_COUNTERS).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecapCounter {
    /// IPIP packet whose outer header was removed.
    Decapsulated,
    /// Anything else: passed untouched.
    Passed,
    /// IPIP packet too short to hold an inner IPv4 header: passed untouched.
    Malformed,
    /// IPIP packet from an outer source outside the allowed prefixes: passed untouched (the
    /// stack, without an ipip device, refuses it), never opened.
    Refused,
}

impl DecapCounter {
    pub const ALL: &'static [DecapCounter] =
        &[DecapCounter::Decapsulated, DecapCounter::Passed, DecapCounter::Malformed, DecapCounter::Refused];
    pub const COUNT: u32 = DecapCounter::ALL.len() as u32;
    pub const fn name(self) -> &'static str {
        match self {
            DecapCounter::Decapsulated => "decapsulated",
            DecapCounter::Passed => "passed",
            DecapCounter::Malformed => "malformed",
            DecapCounter::Refused => "refused",
        }
    }
}
