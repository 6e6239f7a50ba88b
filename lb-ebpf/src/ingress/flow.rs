//! A VIP packet's flow: its connection-table key, hash and way.
use lb_common::family;
use lb_common::flow::{FlowEntry, FlowKey, FlowSlot};

use crate::table::Tables;

/// A VIP packet's flow: its key and table hash, its connection-table way if it has one, and
/// the tables (None until userspace configured them).
pub struct Flow<'a> {
    pub key: &'a FlowKey,
    pub hash: u32,
    pub slot: Option<*mut FlowSlot<FlowEntry>>,
    /// This packet is the flow's first of the current reply-check period
    /// (`table::REPLY_CHECK_SHIFT`).
    pub new_period: bool,
    pub tables: Option<Tables>,
}

/// A connection-table key from IPv4 header fields.
#[inline(always)]
pub fn flow_key(src: [u8; 4], dst: [u8; 4], src_port: u16, dst_port: u16, protocol: u8) -> FlowKey {
    FlowKey {
        src: lb_common::ipv4_bytes(src),
        dst: lb_common::ipv4_bytes(dst),
        src_port,
        dst_port,
        protocol,
        family: family::IPV4,
        _pad: [0; 2],
    }
}
