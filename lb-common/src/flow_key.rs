//! A flow's 5-tuple, the key of both connection tables and of the flow hash: below `flow`
//! (the tables) and `hash` (the hash that places a flow), which both read it.
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

impl FlowKey {
    /// A key from its parts, ports in network byte order as on the wire; the padding is zero,
    /// so equal flows give equal bytes (the tables compare and hash the key as words).
    #[inline(always)]
    pub const fn new(src: IpBytes, dst: IpBytes, src_port: u16, dst_port: u16, protocol: u8, family: u8) -> FlowKey {
        FlowKey { src, dst, src_port, dst_port, protocol, family, _pad: [0; 2] }
    }

    /// The same flow seen from its other end: addresses and ports swapped (a reply's key).
    #[inline(always)]
    pub const fn reversed(&self) -> FlowKey {
        FlowKey::new(self.dst, self.src, self.dst_port, self.src_port, self.protocol, self.family)
    }

    /// The key as five words: compared word by word (a derived `==` may become a memcmp call,
    /// which BPF programs cannot make).
    #[inline(always)]
    pub fn words(&self) -> [u64; 5] {
        // SAFETY: 40 bytes, 8-byte aligned, no implicit padding; any bits are valid u64s.
        unsafe { *(self as *const FlowKey as *const [u64; 5]) }
    }

    #[inline(always)]
    pub fn same_as(&self, other: &FlowKey) -> bool {
        let (a, b) = (self.words(), other.words());
        a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3] && a[4] == b[4]
    }
}

crate::user_pod!(FlowKey);
const _: () = assert!(core::mem::size_of::<FlowKey>() == 40);
