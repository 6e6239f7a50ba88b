//! `lb-ctl trace`: streams the daemon's trace (`POST /v1/trace`) as lines of text, or as the
//! JSON lines the daemon sends (--json). Ctrl-C, --count or a closed pipe end it; the daemon
//! removes the filter when the connection closes (also when this process is killed).
use std::io::Write as _;

use http_body_util::BodyExt as _;

use crate::api::client::{Client, ClientError};
use crate::api::trace::{TraceEvent, TraceRequest, TraceStats, TracedPacket};

#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct TraceArgs {
    /// Only this VIP's packets and replies (name, ADDR:PORT[/PROTOCOL] or ADDR).
    #[arg(long)]
    pub vip: Option<String>,
    /// Only this client's packets: ADDR or ADDR/LEN.
    #[arg(long, value_name = "ADDR[/LEN]")]
    pub client: Option<String>,
    /// Only packets sent to this backend (ADDR:PORT, or ADDR).
    #[arg(long)]
    pub backend: Option<String>,
    /// Only these verdicts (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', value_parser = ["pass", "drop", "tx", "redirect", "aborted"])]
    pub verdict: Vec<String>,
    /// Stop after N packets.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Records each CPU may send a second (the rest are counted as over budget).
    #[arg(long, value_name = "N")]
    pub budget: Option<u32>,
    /// Print the daemon's JSON lines (packets and the `stats` lines every second).
    #[arg(long)]
    pub json: bool,
}

/// Streams until Ctrl-C, `--count` packets, or the daemon ends the stream.
pub async fn run(c: &Client, args: TraceArgs) -> Result<(), ClientError> {
    let request = TraceRequest {
        vip: args.vip.clone(),
        client: args.client.clone(),
        backend: args.backend.clone(),
        verdict: args.verdict.clone(),
        budget: args.budget,
    };
    let mut body = c.trace(&request).await?;
    let mut pending = Vec::new();
    let mut shown = 0u64;
    let mut last = TraceStats::default();
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let frame = tokio::select! {
            _ = &mut interrupted => break,
            frame = body.frame() => frame,
        };
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| ClientError::Protocol(e.to_string()))?;
        let Ok(data) = frame.into_data() else { continue };
        pending.extend_from_slice(&data);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let event: TraceEvent = serde_json::from_slice(&line)
                .map_err(|e| ClientError::Protocol(format!("unexpected trace line: {e}")))?;
            let text = match &event {
                _ if args.json => String::from_utf8_lossy(&line).into_owned(),
                TraceEvent::Packet(p) => line_of(p),
                TraceEvent::Stats(s) => {
                    // Said on stderr, and only when something more was missed.
                    if missed(s) > missed(&last) {
                        eprintln!("lb-ctl: {}", missed_text(s));
                    }
                    last = s.clone();
                    continue;
                }
            };
            let mut out = std::io::stdout().lock();
            // A closed pipe (`| head`) ends the trace quietly.
            if out.write_all(text.as_bytes()).and_then(|()| out.flush()).is_err() {
                return Ok(());
            }
            if matches!(event, TraceEvent::Packet(_)) {
                shown += 1;
                if args.count.is_some_and(|n| shown >= n) {
                    return Ok(());
                }
            }
        }
    }
    if missed(&last) > 0 && !args.json {
        eprintln!("lb-ctl: {}", missed_text(&last));
    }
    Ok(())
}

fn missed(s: &TraceStats) -> u64 {
    s.over_budget + s.ring_full + s.lost
}

fn missed_text(s: &TraceStats) -> String {
    format!(
        "not shown so far: {} over the per-CPU budget, {} with the ring full, {} too slow to print",
        s.over_budget, s.ring_full, s.lost
    )
}

/// One packet as a line: time, CPU, flow, then the decision and what became of the packet.
pub fn line_of(p: &TracedPacket) -> String {
    let time = p.time.split_once('T').map_or(p.time.as_str(), |(_, t)| t.trim_end_matches('Z'));
    let flags = if p.tcp_flags.is_empty() { String::new() } else { format!(" [{}]", p.tcp_flags) };
    let mut line = format!("{time} cpu{} {} {} {} > {}{flags}", p.cpu, p.family, p.protocol, p.src, p.dst);
    match (&p.vip, p.kind.as_str()) {
        (Some(vip), "reply") => line += &format!(" reply of {vip}"),
        (None, "reply") => line += " reply",
        (Some(vip), _) => line += &format!(" vip {vip}"),
        (None, _) => {}
    }
    line += ":";
    if !p.decision.is_empty() {
        line += &format!(" {}", p.decision.join(","));
    }
    if let Some(slot) = p.ring_slot {
        line += &format!(" slot {slot}");
    }
    if let Some(backend) = &p.backend {
        line += &format!(" -> {backend}");
    }
    line += &format!(" => {} ({})", p.verdict, p.reason);
    if let Some(rewrite) = &p.rewrite {
        line += &format!(" {rewrite}");
    }
    if let Some(mac) = &p.next_hop {
        line += &format!(" via {mac}");
    }
    line + "\n"
}
