//! `POST /v1/trace`: the balancer's decisions on live packets, streamed as JSON lines (one
//! [`TraceEvent`] a line) for as long as the client keeps the connection. The filter lives in
//! the data plane only while the stream does: the daemon removes it when the client closes the
//! connection, however the client ends (Ctrl-C, kill -9), as soon as a write to it fails (a
//! `stats` line goes out every second, so within about two seconds).
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::response::IntoResponse as _;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::{ApiError, Service};

/// The body of `POST /v1/trace`: every field set must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceRequest {
    /// VIP name, `ADDR:PORT[/PROTOCOL]` or `ADDR`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vip: Option<String>,
    /// `ADDR` or `ADDR/LEN`: the client (source of VIP packets, destination of replies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// A backend, `ADDR:PORT` (of any VIP) or `ADDR` when only one backend has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// XDP actions wanted: `pass`, `drop`, `tx`, `redirect`; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verdict: Vec<String>,
    /// Records each CPU may send a second (default `lb_common::trace::DEFAULT_TRACE_BUDGET`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u32>,
}

/// One line of the stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TraceEvent {
    /// A traced packet.
    Packet(Box<TracedPacket>),
    /// Every second: what was not shown since the trace started.
    Stats(TraceStats),
}

/// A traced packet, as the program decided it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracedPacket {
    /// When the program saw it (RFC 3339, microseconds).
    pub time: String,
    pub cpu: u32,
    /// `ipv4` or `ipv6`.
    pub family: String,
    /// `tcp` or `udp`.
    pub protocol: String,
    /// The packet as it arrived: source and destination.
    pub src: String,
    pub dst: String,
    /// TCP flags as it arrived (`S`, `SA`, `F`, `R`, `P`, `A` ...); empty for UDP.
    pub tcp_flags: String,
    /// `vip` (a packet to a VIP) or `reply` (a NAT backend's answer).
    pub kind: String,
    /// The VIP (its name, or `ADDR:PORT/PROTOCOL`), if known.
    pub vip: Option<String>,
    pub vip_id: Option<u32>,
    /// The backend chosen (VIP packets), `ADDR:PORT`.
    pub backend: Option<String>,
    pub backend_id: Option<u32>,
    /// The flow's slot in the VIP's ring.
    pub ring_slot: Option<u32>,
    /// What was decided on the way: `flow_hit`, `flow_new`, `flow_rerouted`, `flow_table_full`,
    /// `new_flow_unrecorded`, `new_flow_set_proven`, `nat_reply`, `nat_reply_by_backend`,
    /// `reverse_flow_restored`, `nexthop_lookup` ... (counter names).
    pub decision: Vec<String>,
    /// The XDP action: `pass`, `drop`, `tx`, `redirect`.
    pub verdict: String,
    /// The verdict's counter (`forward_tx`, `drop_no_backend`, `pass_no_neighbour` ...).
    pub reason: String,
    /// The rewrite as the packet leaves: `nat to ADDR:PORT`, `ipip SRC > DST`, `gue SRC > DST`,
    /// `mac`, `nat from ADDR:PORT` (a reply); None when it was not rewritten.
    pub rewrite: Option<String>,
    /// The next hop's MAC address, for packets sent (tx, redirect).
    pub next_hop: Option<String>,
    /// The interface the packet arrived on.
    pub ifindex: u32,
}

/// Records this trace did not show, since it started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceStats {
    /// Shown.
    pub shown: u64,
    /// Matching packets the program did not record: a CPU's budget for the second was spent
    /// (counted over every trace running).
    pub over_budget: u64,
    /// Matching packets the program did not record: the ring buffer was full.
    pub ring_full: u64,
    /// Records this trace's client was too slow to take.
    pub lost: u64,
}

/// A running trace: its events, and what removes its filter when dropped.
pub struct TraceSession {
    pub events: mpsc::Receiver<TraceEvent>,
    /// Dropped with the session (the response body): removes the filter.
    pub guard: Box<dyn Send + Sync>,
}

/// The answer to `POST /v1/trace`: the session's events as JSON lines. The body owns the
/// session, so the filter goes when the body does (the connection closed or failed).
pub async fn stream<S: Service>(service: S, request: TraceRequest) -> Result<axum::response::Response, ApiError> {
    let session = service.trace(request).await?;
    let lines = futures_util::stream::unfold(session, |mut session| async move {
        let event = session.events.recv().await?;
        let mut line = serde_json::to_vec(&event).expect("trace events serialize to JSON");
        line.push(b'\n');
        Some((Ok::<_, Infallible>(Bytes::from(line)), session))
    });
    Ok(([(axum::http::header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(lines)).into_response())
}
