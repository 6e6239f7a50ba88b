//! A backend as the data plane sees it (BACKENDS map, indexed by backend id).
use crate::IpBytes;

/// Ring slot value meaning "no backend": the VIP has no usable backend.
pub const BACKEND_NONE: u32 = u32::MAX;

/// NAT_BACKENDS key: a NAT backend's (address, port in network order, protocol, family), the
/// source of its replies.
pub type NatBackendKey = crate::vip::VipKey;

/// NAT_BACKENDS value of a backend that serves more than one NAT VIP: a reply from it that
/// the reverse table does not know cannot be given a VIP, and is dropped rather than leaked.
/// Otherwise the value is the id of the one VIP it serves.
pub const NAT_BACKEND_SHARED: u32 = u32::MAX;

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
    /// Which holder of this id this is: the map writer gives an id a new generation each time
    /// it is given to another backend (or given again after a removal), and connection-table
    /// entries record it, so a flow of an earlier holder never matches the id's new backend.
    /// Never 0 for a written backend.
    pub generation: u32,
}

impl Backend {
    /// Whether this entry describes a live backend.
    #[inline(always)]
    pub fn is_active(&self) -> bool {
        self.flags & BACKEND_ACTIVE != 0
    }

    /// Whether this entry is the same backend as `other` (address, port, family), whatever
    /// its flags and generation.
    pub fn same_backend(&self, other: &Backend) -> bool {
        self.addr == other.addr && self.port == other.port && self.family == other.family
    }
}

/// The generation backend id gets when the map writer writes `new` where `current` is (the
/// entry the map holds now, if any): the same while the id holds the same active backend,
/// else the next one (never 0), so flows recorded for an earlier holder stop matching.
pub fn backend_generation(current: Option<&Backend>, new: &Backend) -> u32 {
    match current {
        Some(old) if old.is_active() && old.generation != 0 && old.same_backend(new) => old.generation,
        Some(old) => old.generation.wrapping_add(1).max(1),
        None => 1,
    }
}

crate::user_pod!(Backend);
const _: () = assert!(core::mem::size_of::<Backend>() == 24);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4_bytes;

    fn backend(last: u8, port: u16) -> Backend {
        Backend {
            addr: ipv4_bytes([198, 51, 100, last]),
            port: port.to_be(),
            family: 4,
            flags: BACKEND_ACTIVE,
            generation: 0,
        }
    }

    #[test]
    fn an_id_keeps_its_generation_only_while_it_holds_the_same_active_backend() {
        let first = Backend { generation: backend_generation(None, &backend(11, 8080)), ..backend(11, 8080) };
        assert_eq!(first.generation, 1, "a never-written id starts at 1 (0 is never a generation)");
        assert_eq!(backend_generation(Some(&first), &backend(11, 8080)), 1, "rewritten as it was: same generation");
        assert_eq!(backend_generation(Some(&first), &backend(12, 8080)), 2, "another address: the next one");
        assert_eq!(backend_generation(Some(&first), &backend(11, 9090)), 2, "another port: the next one");
        let removed = Backend { flags: 0, ..first };
        assert_eq!(
            backend_generation(Some(&removed), &backend(11, 8080)),
            2,
            "given back after a removal: the next one"
        );
        let last = Backend { generation: u32::MAX, ..backend(13, 80) };
        assert_eq!(backend_generation(Some(&last), &backend(14, 80)), 1, "wraps past 0");
    }
}
