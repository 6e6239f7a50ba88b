//! GUE as `dsr-gue` uses it (Katran's "GUE variant 1"): the client's IP packet straight after an
//! outer IPv4 or IPv6 and UDP header, no GUE header. UDP crosses any L3 network, and the outer source
//! port, taken from the flow's hash, lets the backend's NIC spread flows over its queues (RSS).

/// Outer UDP destination port: what the balancer sends to and `lb_decap` opens.
pub const PORT: u16 = 6080;

/// Bytes the outer IPv4 and UDP headers add.
pub const OVERHEAD: usize = 28;

/// Bytes the outer IPv6 and UDP headers add. Over IPv6 the outer UDP checksum is zero too, as
/// RFC 6935 allows for tunnels (Katran does the same): the inner packet carries its own, and
/// lb_decap, not a UDP socket, receives it.
pub const OVERHEAD6: usize = 48;

/// The outer UDP source port of a flow whose connection-table hash is `hash`: in the dynamic
/// range 49152-65535, so the backend's RSS sees the flows apart.
#[inline(always)]
pub fn source_port(hash: u32) -> u16 {
    0xc000 | (hash as u16 & 0x3fff)
}
