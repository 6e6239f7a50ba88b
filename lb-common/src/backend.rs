//! A backend as the data plane sees it (BACKENDS map, indexed by backend id).
use crate::IpBytes;

/// Ring slot value meaning "no backend": the VIP has no usable backend.
pub const BACKEND_NONE: u32 = u32::MAX;

/// `Backend::flags`: the backend may carry traffic. A cleared entry (flags 0) is a removed
/// backend: flows pinned to it are re-placed on the ring.
pub const BACKEND_ACTIVE: u8 = 1;

/// BACKENDS map value. `port` is in network byte order.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backend {
    pub addr: IpBytes,
    pub port: u16,
    pub family: u8,
    pub flags: u8,
}

impl Backend {
    /// Whether this entry describes a live backend.
    #[inline(always)]
    pub fn is_active(&self) -> bool {
        self.flags & BACKEND_ACTIVE != 0
    }
}

crate::user_pod!(Backend);
const _: () = assert!(core::mem::size_of::<Backend>() == 20);
