//! Run-time settings of the data plane (CONFIG map, one entry) and the PORT_FLAGS pre-filter.

/// CONFIG map value (index 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataplaneConfig {
    /// Slots per VIP ring (a prime); VIP `id`'s ring starts at `id * ring_size` in RINGS.
    /// Zero means "not configured yet": VIP packets are then passed to the stack.
    pub ring_size: u32,
    /// Seed mixed into the flow hash.
    pub hash_seed: u32,
    /// Next-hop cache generation: a CPU reuses a cached next hop only while this is the
    /// generation it was cached under. Userspace bumps it every `nexthop_ttl_ms` (and may on
    /// route changes); 0 disables the cache. See `nexthop::NextHop`.
    pub nexthop_generation: u32,
    /// Sets in FLOWS and REVERSE_FLOWS (a power of two; see `flow`). The loader sizes the maps
    /// and the map writer fills this in from them; 0 means "not configured yet".
    pub flow_sets: u32,
    /// Seed of the connection tables' hash (which set a flow lives in): random for each new
    /// set of maps and kept with them, so nobody outside can aim flows at one set to evict
    /// another flow. Filled in by the map writer.
    pub table_seed: u32,
    /// New flows each CPU may record per window of 2^30 ns (about a second); 0: no limit.
    /// Past it, new flows are still placed by the ring but not recorded
    /// (`new_flow_unrecorded`): a flood cannot churn the tables faster than this.
    pub new_flow_budget: u32,
    /// Nonzero: every flow recorded is also reported on FLOW_EVENTS ([`crate::flow::SharedFlow`])
    /// for userspace to share with the other balancers (`[cluster]`).
    pub share_flows: u8,
    /// The connection tables' hash function ([`crate::table_hash::kind`]), kept with the tables
    /// like `table_seed`. Builds before layout version 4 had `share_flows` as a `u32` here,
    /// 0 or 1 on a little-endian host: this byte then reads 0, their hash.
    pub table_hash_kind: u8,
    pub _pad: [u8; 2],
}

impl DataplaneConfig {
    /// The connection tables' hash.
    #[inline(always)]
    pub fn table_hash(&self) -> crate::table_hash::TableHash {
        crate::table_hash::TableHash { kind: self.table_hash_kind, seed: self.table_seed }
    }
}

/// PORT_FLAGS bits, indexed by L4 port (host order). They let the program skip the VIPS and
/// REVERSE_FLOWS hash lookups for ports no VIP or NAT backend uses, which keeps the cost of
/// non-VIP traffic at two array reads.
pub mod port_flags {
    /// Some TCP VIP listens on this destination port.
    pub const VIP_TCP: u32 = 1 << 0;
    /// Some UDP VIP listens on this destination port.
    pub const VIP_UDP: u32 = 1 << 1;
    /// Some NAT backend of a TCP VIP answers from this source port.
    pub const NAT_BACKEND_TCP: u32 = 1 << 2;
    /// Some NAT backend of a UDP VIP answers from this source port.
    pub const NAT_BACKEND_UDP: u32 = 1 << 3;

    /// The VIP and NAT-backend bits of L4 `protocol` (TCP or UDP; None for any other).
    #[inline(always)]
    pub const fn of_protocol(protocol: u8) -> Option<(u32, u32)> {
        match protocol {
            crate::ip_proto::TCP => Some((VIP_TCP, NAT_BACKEND_TCP)),
            crate::ip_proto::UDP => Some((VIP_UDP, NAT_BACKEND_UDP)),
            _ => None,
        }
    }
}

crate::user_pod!(DataplaneConfig);
const _: () = assert!(core::mem::size_of::<DataplaneConfig>() == 28);
