//! The QUIC row of `bench dataplane`: an established flow's short-header packet on a VIP with
//! quic, so its cost beside "established UDP (NAT)" is the server-id lookup (reading the
//! connection ID, one QUIC_SERVERS hash lookup, the backend check).
use lb_common::backend::{BACKEND_ACTIVE, Backend};
use lb_common::config::port_flags;
use lb_common::quic::{CID_BYTES, CidVersion, QuicServerKey, VIP_QUIC, encode};
use lb_common::vip::{VipInfo, VipKey, forwarding, hash_mode};
use lb_common::{family, ip_proto, ipv4_bytes};
use lb_ctl::dataplane::Dataplane as _;
use lb_ctl::dataplane::aya::AyaDataplane;

use super::dataplane::{Path, UNSPENT};
use crate::fixture::{B1, B2, CLIENT, RING, SEED};
use crate::packets::Frame;

const VIP: [u8; 4] = [203, 0, 113, 80];
const PORT: u16 = 443;
const BACKEND_PORT: u16 = 4433;
/// Backend ids past the fixture's.
const BACKENDS: [(u32, [u8; 4], u32); 2] = [(40, B1, 0x0101), (41, B2, 0x0202)];

/// Adds a NAT UDP VIP with quic (id `vip_id`, two backends with server ids) to the fixture's
/// balancer, and returns the row: the client's short header naming the backend the ring gives
/// it (so it is a flow hit routed by its server id, the steady state of a QUIC connection).
pub(super) fn established_short_header(dp: &mut AyaDataplane, vip_id: u32) -> anyhow::Result<Path> {
    for (id, addr, server_id) in BACKENDS {
        let backend = Backend {
            addr: ipv4_bytes(addr),
            port: BACKEND_PORT.to_be(),
            family: family::IPV4,
            flags: BACKEND_ACTIVE,
            generation: 0,
        };
        dp.upsert_backend(id, backend)?;
        dp.set_quic_server(QuicServerKey { vip_id, server_id }, Some(id))?;
    }
    let ring: Vec<u32> = (0..RING as usize).map(|slot| BACKENDS[slot % BACKENDS.len()].0).collect();
    dp.write_ring(vip_id, &ring)?;
    let key = VipKey { addr: ipv4_bytes(VIP), port: PORT.to_be(), protocol: ip_proto::UDP, family: family::IPV4 };
    let info = VipInfo {
        id: vip_id,
        forwarding: forwarding::NAT,
        hash: hash_mode::CLIENT_IP,
        flags: VIP_QUIC,
        ..Default::default()
    };
    dp.upsert_vip(key, info)?;
    dp.set_port_flags(PORT, port_flags::VIP_UDP)?;
    dp.set_port_flags(BACKEND_PORT, port_flags::NAT_BACKEND_UDP)?;
    let home = BACKENDS[(lb_common::hash::client_hash(&ipv4_bytes(CLIENT), SEED) % RING) as usize % BACKENDS.len()];
    let cid = encode(CidVersion::V1, home.2, &[0x5a; CID_BYTES]).expect("the id fits version 1");
    let mut payload = vec![0x41];
    payload.extend_from_slice(&cid);
    payload.extend_from_slice(&[0; 32]);
    Ok(Path {
        name: "established QUIC short header (NAT)",
        frame: Frame::udp(CLIENT, 5443, VIP, PORT).with(|f| f.payload = payload).bytes(),
        action: 3,
        forget: None,
        target: None,
        katran: false,
        budget: UNSPENT,
        share: false,
        trace: false,
    })
}
