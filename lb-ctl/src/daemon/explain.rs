//! `explain`: which backend a flow gets and why, read from the maps the data plane reads.
use std::net::IpAddr;

use lb_common::backend::BACKEND_NONE;
use lb_common::flow::FlowKey;
use lb_common::hash::{ring_hash, ring_slot};

use super::explain_quic::QuicRoute;
use super::writer::Writer;
use crate::api::ApiError;
use crate::api::types::{Decision, ExplainRequest, ExplainView};
use crate::config::HashMode;
use lb_common::ip_bytes;

impl Writer {
    /// Which backend a flow from `client` to the VIP gets, computed the way the XDP program
    /// does: the connection table first, then ring slot `hash % ring_size`.
    pub(super) fn explain(&self, r: &ExplainRequest) -> Result<ExplainView, ApiError> {
        let v = self.state.find_vip(&r.vip)?;
        if !v.forwarding.is_xdp() {
            return Err(ApiError::bad_request(format!(
                "VIP {:?} is served by the userspace proxy; explain covers XDP VIPs",
                v.label()
            )));
        }
        let (ip, port) = match r.client.parse::<std::net::SocketAddr>() {
            Ok(sa) => (sa.ip(), Some(sa.port())),
            Err(_) => match r.client.parse::<IpAddr>() {
                Ok(ip) => (ip, None),
                Err(_) => {
                    return Err(ApiError::bad_request(format!(
                        "malformed client address {:?}: expected ADDR or ADDR:PORT (IPv6 as [ADDR]:PORT)",
                        r.client
                    )));
                }
            },
        };
        if ip.is_ipv4() != v.address.is_ipv4() {
            return Err(ApiError::bad_request(format!("client {ip} and VIP {} are not of the same family", v.address)));
        }
        // The key the XDP program builds from the packet's header: 16-byte addresses (IPv4 in
        // the first 4 bytes), ports in network order, and the family (4 or 6).
        let (src, family) = ip_bytes(ip);
        let (dst, _) = ip_bytes(v.address);
        let protocol = v.protocol.ip_proto();
        let ring_size = self.state.ring_size;
        let mut view = ExplainView {
            vip: v.label(),
            client: r.client.clone(),
            decision: Decision::Ring,
            backend: None,
            backend_id: None,
            hash: None,
            slot: None,
            ring_size,
            reason: String::new(),
        };
        if v.hash == HashMode::Flow && port.is_none() {
            return Err(ApiError::bad_request(format!(
                "VIP {:?} hashes the 5-tuple (hash = \"flow\"): give the client as ADDR:PORT",
                v.label()
            )));
        }
        let key = FlowKey::new(src, dst, port.unwrap_or(0).to_be(), v.port.to_be(), protocol, family);
        let mut notes = Vec::new();
        if let Some(cid) = &r.quic_cid {
            match super::explain_quic::route(v, cid, &self.dp.quic_servers()?)? {
                QuicRoute::Routed { backend, why } => {
                    view.decision = Decision::QuicServerId;
                    view.backend = Some(backend.address);
                    view.backend_id = Some(backend.id);
                    view.reason = format!("{why}: short-header packets go there whatever the client's address");
                    return Ok(view);
                }
                QuicRoute::FallsBack(why) => notes.push(why),
            }
        }
        if port.is_some() {
            match self.dp.lookup_flow(&key)? {
                Some(entry) => match v.backends.iter().find(|b| b.id == entry.backend_id) {
                    Some(b) => {
                        view.decision = Decision::Conntrack;
                        view.backend = Some(b.address);
                        view.backend_id = Some(b.id);
                        view.reason = format!(
                            "connection-table hit: this flow is pinned to backend {} (id {}){}",
                            b.address,
                            b.id,
                            if b.effective_weight() == 0 { ", which is draining" } else { "" }
                        );
                        return Ok(view);
                    }
                    None => notes.push(format!(
                        "the connection-table entry names backend id {}, which was removed: the flow is placed again",
                        entry.backend_id
                    )),
                },
                None => notes.push("not in the connection table: a new flow".to_string()),
            }
        }
        // The data plane's own choice, from lb-common: explain cannot drift from it.
        let seed = self.state.hash_seed;
        let hash = ring_hash(v.hash.wire(), &key, seed);
        let slot = ring_slot(v.hash.wire(), &key, seed, ring_size);
        let id = self.dp.ring_slot(v.id, slot)?;
        view.hash = Some(hash);
        view.slot = Some(slot);
        let what = match v.hash {
            HashMode::Ip => "hash of the client address",
            HashMode::Flow => "hash of the 5-tuple",
        };
        if id == BACKEND_NONE {
            notes.push(format!("ring slot {slot} of {ring_size} ({what} {hash:#010x}) is empty: no usable backend, the packet is dropped"));
        } else {
            let b = v.backends.iter().find(|b| b.id == id);
            view.backend_id = Some(id);
            view.backend = b.map(|b| b.address);
            let name = b.map_or(format!("id {id}"), |b| format!("{} (id {id})", b.address));
            let mut why = format!("ring slot {slot} of {ring_size} ({what} {hash:#010x}) holds backend {name}");
            if crate::state::plan::all_down(v) {
                why.push_str(&format!(
                    "; no backend is healthy, the VIP fails {}",
                    match v.all_down {
                        crate::config::AllDownPolicy::Forward => "open",
                        crate::config::AllDownPolicy::Drop => "closed",
                    }
                ));
            }
            notes.push(why);
        }
        view.reason = notes.join("; ");
        Ok(view)
    }
}
