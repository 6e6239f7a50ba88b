//! QUIC routing by server id: what a backend writes into the connection IDs it issues, how the
//! data plane reads it back, and the QUIC_SERVERS map that names the backend of each id.
//!
//! The encoding is Katran's (`katran/lib/bpf/pckt_parsing.h`, `parse_quic`), so backends built
//! for Katran (mvfst, or any stack with a Katran-style connection-ID generator) work unchanged.
//! A short-header packet (first byte's top bit clear) carries the destination connection ID
//! right after that byte; its first byte's top two bits are the CID version:
//!
//! | version | server id bits                                      | ids              |
//! |---------|-----------------------------------------------------|------------------|
//! | 0       | none (the balancer falls back to the flow table)    | -                |
//! | 1       | 16: byte 0 low 6 bits, byte 1, byte 2 top 2 bits    | 1-65535          |
//! | 2       | 24: bytes 1, 2, 3                                   | 1-16777215       |
//! | 3       | 32: bytes 1, 2, 3, 4                                | 1-4294967295     |
//!
//! Server id 0 names no server (as in Katran). The balancer reads [`CID_BYTES`] bytes of
//! connection ID, as Katran does: shorter connection IDs are not routed by id.

/// First-byte bit of a QUIC long header (Initial, 0-RTT, Handshake, Retry, version
/// negotiation): clear in a short header (RFC 9000, 17.2 and 17.3).
pub const LONG_HEADER: u8 = 0x80;

/// Bytes of destination connection ID the balancer needs behind a short header's first byte
/// (Katran's `QUIC_MIN_CONNID_LEN`): a packet with fewer is not routed by id.
pub const CID_BYTES: usize = 8;

/// UDP payload bytes a short-header packet must have to be routed by id: its first byte and
/// [`CID_BYTES`] of connection ID.
pub const SHORT_HEADER_BYTES: usize = 1 + CID_BYTES;

/// The connection-ID versions: how a server id sits in a connection ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CidVersion {
    /// 16-bit server id.
    V1,
    /// 24-bit server id.
    V2,
    /// 32-bit server id.
    V3,
}

impl CidVersion {
    /// The version as written in the top two bits of the connection ID (1-3).
    pub const fn number(self) -> u8 {
        match self {
            CidVersion::V1 => 1,
            CidVersion::V2 => 2,
            CidVersion::V3 => 3,
        }
    }

    /// The version of number `n` (1-3).
    pub const fn from_number(n: u8) -> Option<CidVersion> {
        match n {
            1 => Some(CidVersion::V1),
            2 => Some(CidVersion::V2),
            3 => Some(CidVersion::V3),
            _ => None,
        }
    }

    /// The highest server id this version carries.
    pub const fn max_server_id(self) -> u32 {
        match self {
            CidVersion::V1 => 0xffff,
            CidVersion::V2 => 0xff_ffff,
            CidVersion::V3 => u32::MAX,
        }
    }
}

/// The server id a connection ID carries (its first [`CID_BYTES`] bytes), with its version;
/// None for version 0 or server id 0 (no server named). Katran's `parse_quic` decoding.
#[inline(always)]
pub fn server_id(cid: &[u8; CID_BYTES]) -> Option<(CidVersion, u32)> {
    let (b0, b1, b2, b3, b4) = (cid[0] as u32, cid[1] as u32, cid[2] as u32, cid[3] as u32, cid[4] as u32);
    let found = match cid[0] >> 6 {
        1 => (CidVersion::V1, ((b0 & 0x3f) << 10) | (b1 << 2) | (b2 >> 6)),
        2 => (CidVersion::V2, (b1 << 16) | (b2 << 8) | b3),
        3 => (CidVersion::V3, (b1 << 24) | (b2 << 16) | (b3 << 8) | b4),
        _ => return None,
    };
    if found.1 == 0 { None } else { Some(found) }
}

/// The first bytes of a connection ID that carries `server_id` in `version`, the rest of the
/// [`CID_BYTES`] taken from `rest` (bits the encoding leaves to the server: random in a real
/// one). None if the id does not fit the version, or is 0. What a backend's connection-ID
/// generator writes; the inverse of [`server_id`].
pub fn encode(version: CidVersion, server_id: u32, rest: &[u8; CID_BYTES]) -> Option<[u8; CID_BYTES]> {
    if server_id == 0 || server_id > version.max_server_id() {
        return None;
    }
    let mut cid = *rest;
    let id = server_id.to_be_bytes();
    match version {
        CidVersion::V1 => {
            let id = server_id as u16;
            cid[0] = 0x40 | (id >> 10) as u8;
            cid[1] = (id >> 2) as u8;
            cid[2] = ((id as u8 & 0x3) << 6) | (rest[2] & 0x3f);
        }
        CidVersion::V2 => {
            cid[0] = 0x80 | (rest[0] & 0x3f);
            cid[1..4].copy_from_slice(&id[1..4]);
        }
        CidVersion::V3 => {
            cid[0] = 0xc0 | (rest[0] & 0x3f);
            cid[1..5].copy_from_slice(&id);
        }
    }
    Some(cid)
}

/// QUIC_SERVERS key: a server id within one VIP (ids are the VIP's backends' own: two VIPs
/// may use the same ids for other backends).
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QuicServerKey {
    pub vip_id: u32,
    pub server_id: u32,
}

/// `VipInfo::flags`: the VIP routes QUIC short-header packets by the server id in their
/// connection ID (QUIC_SERVERS), before the connection table.
pub const VIP_QUIC: u8 = 1;

crate::user_pod!(QuicServerKey);
const _: () = assert!(core::mem::size_of::<QuicServerKey>() == 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn katran_v1_layout() {
        // Katran's own example bits: version 01, server id 0x1234 in bits 2..18.
        let id: u32 = 0x1234;
        let cid = [0x40 | (id >> 10) as u8, (id >> 2) as u8, ((id & 3) << 6) as u8, 0, 0, 0, 0, 0];
        assert_eq!(cid[..3], [0x44, 0x8d, 0x00]);
        assert_eq!(server_id(&cid), Some((CidVersion::V1, 0x1234)));
    }

    #[test]
    fn each_version_round_trips_and_leaves_the_free_bits_alone() {
        let rest = [0xff; CID_BYTES];
        for (version, id) in
            [(CidVersion::V1, 1), (CidVersion::V1, 0xffff), (CidVersion::V2, 0xab_cdef), (CidVersion::V3, u32::MAX)]
        {
            let cid = encode(version, id, &rest).unwrap();
            assert_eq!(server_id(&cid), Some((version, id)), "{version:?} {id}");
            assert_eq!(cid[5..], rest[5..], "bytes past the id are the server's");
        }
        let v1 = encode(CidVersion::V1, 0x1234, &[0; CID_BYTES]).unwrap();
        assert_eq!(v1[..3], [0x44, 0x8d, 0x00], "v1: byte 0 low 6 bits, byte 1, byte 2 top 2 bits");
        let v2 = encode(CidVersion::V2, 0x01_0203, &[0; CID_BYTES]).unwrap();
        assert_eq!(v2[..4], [0x80, 1, 2, 3], "v2: bytes 1-3");
        let v3 = encode(CidVersion::V3, 0x0102_0304, &[0; CID_BYTES]).unwrap();
        assert_eq!(v3[..5], [0xc0, 1, 2, 3, 4], "v3: bytes 1-4");
    }

    #[test]
    fn no_server_id_in_version_0_or_id_0_and_ids_must_fit() {
        assert_eq!(server_id(&[0x3f, 0xff, 0xff, 0xff, 0xff, 0, 0, 0]), None, "version 0");
        assert_eq!(server_id(&[0x40, 0, 0x3f, 0, 0, 0, 0, 0]), None, "v1 id 0");
        assert_eq!(encode(CidVersion::V1, 0x1_0000, &[0; CID_BYTES]), None);
        assert_eq!(encode(CidVersion::V2, 0x100_0000, &[0; CID_BYTES]), None);
        assert_eq!(encode(CidVersion::V3, 0, &[0; CID_BYTES]), None);
    }
}
