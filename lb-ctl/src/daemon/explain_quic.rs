//! `explain --quic-cid`: which backend a QUIC connection ID routes to, read from QUIC_SERVERS
//! as the XDP program reads it, decoded by the same function (`lb_common::quic::server_id`).
use lb_common::quic::{CID_BYTES, QuicServerKey, server_id};

use crate::api::ApiError;
use crate::state::{BackendState, VipState};

/// What the connection ID does on the VIP.
pub(super) enum QuicRoute<'a> {
    /// Its server id names this backend: the packet goes there whatever the client's address.
    Routed { backend: &'a BackendState, why: String },
    /// It routes nothing (why): the connection table and ring place the packet.
    FallsBack(String),
}

/// The route of connection ID `hex` (hex digits, `0x` and `:`/`-` separators allowed) on VIP
/// `v`, given the QUIC_SERVERS entries `servers`.
pub(super) fn route<'a>(
    v: &'a VipState,
    hex: &str,
    servers: &[(QuicServerKey, u32)],
) -> Result<QuicRoute<'a>, ApiError> {
    let Some(quic) = &v.quic else {
        return Err(ApiError::bad_request(format!(
            "VIP {:?} does not route QUIC by server id (quic is off): a connection ID changes nothing there",
            v.label()
        )));
    };
    let cid = parse_hex(hex).ok_or_else(|| {
        ApiError::bad_request(format!("malformed connection ID {hex:?}: expected hex bytes, such as 4048d1c2a3b4c5d6"))
    })?;
    let Some(first) = cid.first_chunk::<CID_BYTES>() else {
        return Ok(QuicRoute::FallsBack(format!(
            "connection ID of {} bytes: the balancer reads {CID_BYTES}, so it is not routed by server id",
            cid.len()
        )));
    };
    let Some((version, id)) = server_id(first) else {
        return Ok(QuicRoute::FallsBack(
            "the connection ID names no server (CID version 0, or server id 0)".to_string(),
        ));
    };
    let what = format!("QUIC server id {id} (CID version {})", version.number());
    let holder = v.backends.iter().find(|b| quic.server_ids.get(&b.address) == Some(&id));
    let routed = servers.iter().find(|(k, _)| *k == QuicServerKey { vip_id: v.id, server_id: id }).map(|(_, b)| *b);
    match (holder, routed) {
        (Some(b), Some(routed)) if routed == b.id => {
            Ok(QuicRoute::Routed { backend: b, why: format!("{what} is backend {}'s (id {})", b.address, b.id) })
        }
        (Some(b), _) => Ok(QuicRoute::FallsBack(format!(
            "{what} is backend {}'s, which takes no connections now ({}, {}): not routed by it",
            b.address,
            b.health.as_str(),
            b.admin_state()
        ))),
        (None, _) => Ok(QuicRoute::FallsBack(format!("{what}: no backend of the VIP has it, not routed by it"))),
    }
}

fn parse_hex(text: &str) -> Option<Vec<u8>> {
    let digits: String = text.trim().trim_start_matches("0x").chars().filter(|c| !matches!(c, ':' | '-')).collect();
    if digits.is_empty() || !digits.len().is_multiple_of(2) {
        return None;
    }
    (0..digits.len()).step_by(2).map(|i| u8::from_str_radix(digits.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use lb_common::quic::{CID_BYTES, CidVersion, encode};

    use crate::api::types::{Decision, ExplainRequest};
    use crate::testing::rig::{Daemon, lb_toml, refused};

    const H3: &str = r#"
[[vip]]
name = "h3"
address = "203.0.113.12"
port = 443
protocol = "udp"
quic = true
backends = [
  { address = "198.51.100.21", quic_server_id = 21 },
  { address = "198.51.100.22", quic_server_id = 22 },
]
"#;

    fn hex(version: CidVersion, id: u32) -> String {
        encode(version, id, &[0xab; CID_BYTES]).unwrap().iter().map(|b| format!("{b:02x}")).collect()
    }

    fn asking(client: &str, cid: String) -> ExplainRequest {
        ExplainRequest { vip: "h3".into(), client: client.into(), quic_cid: Some(cid) }
    }

    #[tokio::test]
    async fn explain_follows_the_server_id_of_a_connection_id() {
        let d = Daemon::start(&lb_toml(H3)).await;
        let c = &d.client;
        let e = c.explain(&asking("192.0.2.50:4000", hex(CidVersion::V1, 22))).await.unwrap();
        assert_eq!((e.decision, e.backend), (Decision::QuicServerId, Some("198.51.100.22:443".parse().unwrap())));
        assert!(
            e.reason.starts_with("QUIC server id 22 (CID version 1) is backend 198.51.100.22:443's"),
            "{}",
            e.reason
        );

        // Unknown ids, version 0, short IDs: the ring decides, and the reason says why.
        for (cid, why) in [
            (hex(CidVersion::V2, 99), "QUIC server id 99 (CID version 2): no backend of the VIP has it"),
            ("3fffffffffffffff".to_string(), "the connection ID names no server"),
            ("4048d1".to_string(), "connection ID of 3 bytes"),
        ] {
            let e = c.explain(&asking("192.0.2.50", cid)).await.unwrap();
            assert_eq!(e.decision, Decision::Ring);
            assert!(e.reason.starts_with(why), "{}", e.reason);
        }

        // A drained backend's id routes nothing.
        c.drain_backend(&d.req("h3", "198.51.100.22", None)).await.unwrap();
        let e = c.explain(&asking("192.0.2.50", hex(CidVersion::V1, 22))).await.unwrap();
        assert_eq!(e.decision, Decision::Ring);
        assert!(e.reason.contains("takes no connections now (unchecked, draining)"), "{}", e.reason);

        let (status, message) = refused(c.explain(&asking("192.0.2.50", "xyz".into())).await);
        assert_eq!(
            (status, message.as_str()),
            (400, "malformed connection ID \"xyz\": expected hex bytes, such as 4048d1c2a3b4c5d6")
        );
        let not_quic = ExplainRequest {
            vip: "dns".into(),
            client: "192.0.2.50:53".into(),
            quic_cid: Some(hex(CidVersion::V1, 1)),
        };
        let (status, message) = refused(c.explain(&not_quic).await);
        assert_eq!(status, 400);
        assert!(message.contains("does not route QUIC by server id"), "{message}");
    }
}
