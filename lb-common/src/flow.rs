//! The connection table: which backend each flow was given, and the reverse index used to
//! rewrite NAT replies back to the VIP.
use crate::IpBytes;

/// A flow's 5-tuple as it appears on the wire (ports in network byte order).
/// FLOWS keys use the client → VIP direction; REVERSE_FLOWS keys the backend → client one.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowKey {
    pub src: IpBytes,
    pub dst: IpBytes,
    pub src_port: u16,
    pub dst_port: u16,
    pub protocol: u8,
    pub family: u8,
    pub _pad: [u8; 2],
}

/// FLOWS value: the backend this flow is pinned to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowEntry {
    pub backend_id: u32,
    pub vip_id: u32,
}

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

crate::user_pod!(FlowKey, FlowEntry, ReverseEntry);
const _: () = assert!(core::mem::size_of::<FlowKey>() == 40);
const _: () = assert!(core::mem::size_of::<FlowEntry>() == 8);
const _: () = assert!(core::mem::size_of::<ReverseEntry>() == 24);
