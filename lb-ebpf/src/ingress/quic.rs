//! QUIC routing by server id (`lb_common::quic`, Katran's encoding). A QUIC client may change
//! address or port mid-connection (NAT rebinding, Wi-Fi to mobile): its new 5-tuple has no
//! connection-table entry and hashes anywhere on the ring. Its short-header packets carry the
//! connection ID its server issued, whose first bytes name that server: on a VIP with
//! `VIP_QUIC` such a packet goes to the backend holding the id (QUIC_SERVERS, written by the
//! map writer only for the VIP's healthy, undrained backends). Everything else, long headers
//! included, is placed as any UDP: connection table, then ring. Each outcome has a counter.
use aya_ebpf::macros::map;
use aya_ebpf::maps::HashMap;
use aya_ebpf::programs::XdpContext;
use lb_common::backend::Backend;
use lb_common::limits::MAX_BACKENDS;
use lb_common::quic::{self, CID_BYTES, LONG_HEADER, QuicServerKey, SHORT_HEADER_BYTES, VIP_QUIC};
use lb_common::stats::Counter;
use lb_common::vip::VipInfo;

use crate::flow::Flow;
use crate::ip::IpPacket;
use crate::maps;

/// Bytes of a UDP header.
const UDP_LEN: usize = 8;

/// (VIP id, server id) → backend id, for the VIP's backends that may take the connection.
#[map]
static QUIC_SERVERS: HashMap<QuicServerKey, u32> = HashMap::with_max_entries(MAX_BACKENDS, 0);

/// The backend `pkt`'s QUIC connection ID names, when `vip` routes QUIC by server id and the
/// id is one of its backends' (active in BACKENDS). Counts the outcome on a QUIC VIP.
#[inline(always)]
pub fn server<P: IpPacket>(ctx: &XdpContext, pkt: &P, vip: &VipInfo) -> Option<(u32, &'static Backend)> {
    if vip.flags & VIP_QUIC == 0 {
        return None;
    }
    let udp = pkt.l4_header() as usize;
    // SAFETY: the length field (bytes 4-5) is inside the 8 header bytes parse checked.
    let udp_len = u16::from_be(unsafe { *((udp + 4) as *const u16) }) as usize;
    let payload = udp + UDP_LEN;
    // The datagram's length, not the frame's: a short frame is padded to Ethernet's minimum.
    if udp_len < UDP_LEN + 1 || payload + 1 > ctx.data_end() {
        maps::count(Counter::QuicTruncated);
        return None;
    }
    // SAFETY: bounds checked just above.
    if unsafe { *(payload as *const u8) } & LONG_HEADER != 0 {
        maps::count(Counter::QuicLongHeader);
        return None;
    }
    if udp_len < UDP_LEN + SHORT_HEADER_BYTES || payload + SHORT_HEADER_BYTES > ctx.data_end() {
        maps::count(Counter::QuicTruncated);
        return None;
    }
    // SAFETY: bounds checked just above (the first byte and CID_BYTES behind it).
    let cid = unsafe { *((payload + 1) as *const [u8; CID_BYTES]) };
    let Some((_, server_id)) = quic::server_id(&cid) else {
        maps::count(Counter::QuicNoServerId);
        return None;
    };
    let key = QuicServerKey { vip_id: vip.id, server_id };
    // SAFETY: the value is only read; userspace replaces entries whole.
    let found = unsafe { QUIC_SERVERS.get(key) }.copied();
    match found.and_then(|id| maps::backend(id).filter(|b| b.is_active()).map(|b| (id, b))) {
        Some(server) => {
            maps::count(Counter::QuicRouted);
            Some(server)
        }
        None => {
            maps::count(Counter::QuicUnknownServer);
            None
        }
    }
}

/// Whether the connection-table entry's backend may keep the flow: yes, unless the packet's
/// connection ID names another backend (the connection moved there, or the table's entry is
/// an older connection's on a reused 5-tuple).
#[inline(always)]
pub fn agrees(flow: &Flow, backend_id: u32) -> bool {
    flow.server.is_none_or(|(id, _)| id == backend_id)
}
