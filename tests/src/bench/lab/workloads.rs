//! The three workloads, each run from the client namespace for a bounded time: 64-byte UDP
//! datagrams over many flows (trafgen), TCP connect/request/close (wrk with `Connection:
//! close`), and long-lived TCP streams (iperf3).
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::peers::{HTTP_PORT, STREAM_PORT, UDP_PORT};
use crate::bench::proxy::parse_wrk;
use crate::lab::client_addr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Workload {
    Udp,
    TcpRequests,
    TcpStreams,
}

pub const WORKLOADS: [Workload; 3] = [Workload::Udp, Workload::TcpRequests, Workload::TcpStreams];

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Udp => "UDP 64 B, many flows",
            Workload::TcpRequests => "TCP connect/request/close",
            Workload::TcpStreams => "TCP streams",
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            Workload::Udp => "delivered pps",
            Workload::TcpRequests => "requests/s",
            Workload::TcpStreams => "Gbit/s",
        }
    }
}

/// What the generator reports of one run.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Generated {
    /// Requests completed or bytes received (TCP); UDP counts come from the observer.
    pub done: f64,
    /// Requests that failed, or bytes sent that did not arrive.
    pub failed: f64,
    /// The figure itself for the TCP workloads (requests/s, Gbit/s); UDP's is computed from
    /// the backends' counters.
    pub rate: f64,
}

/// Flows of the UDP workload: the client's addresses times this many source ports.
pub const UDP_SOURCE_PORTS: u16 = 4096;

/// trafgen's packet: Ethernet to the balancer's MAC, a random client address and source port
/// (so many flows), 64 bytes of UDP payload.
pub fn trafgen_conf(src_mac: &str, lb_mac: &str, dst: Ipv4Addr, clients: usize) -> String {
    let first = client_addr(0).octets()[3];
    let last = client_addr(clients - 1).octets()[3];
    format!(
        "{{\n  eth(sa={src_mac}, da={lb_mac}),\n  ipv4(sa={}, sa[3]=drnd({first}, {last}), da={dst}, ttl=64, df),\n  \
         udp(sp=drnd(20000, {}), dp={UDP_PORT}),\n  fill(0x61, 64),\n}}\n",
        client_addr(0),
        20000 + UDP_SOURCE_PORTS - 1
    )
}

/// Runs trafgen in namespace `ns` for `secs` on one CPU (the other runs the balancer); the
/// sent and delivered counts are read by the observer. Through the qdisc (the rig gives the
/// client's eth0 a pfifo): sent straight to the driver, a veth whose peer's ring is full makes
/// trafgen fail ("Flushing TX_RING failed") instead of queueing; the qdisc queues or drops, and
/// the drop columns say so.
pub fn udp(ns: &str, conf: &Path, secs: u64) -> Result<Generated> {
    // trafgen gives up when a flush of its TX ring finds the device busy (EAGAIN); the run's
    // window is kept by starting it again for the rest of the time (counted at the backends
    // and the client's interface, so the figure covers the whole window).
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let mut restarts = 0;
    loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left < std::time::Duration::from_millis(200) {
            return Ok(Generated::default());
        }
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "timeout", "-s", "INT", &format!("{:.3}s", left.as_secs_f64())])
            .args(["trafgen", "--dev", "eth0", "--cpus", "1", "--num", "0", "--qdisc-path", "--conf"])
            .arg(conf)
            .output()
            .context("running trafgen")?;
        // timeout's status is 124 when it had to stop trafgen, which is the normal end here.
        if out.status.success() || matches!(out.status.code(), Some(124) | Some(130)) {
            return Ok(Generated::default());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !stderr.contains("Flushing TX_RING failed") || restarts >= 5 {
            bail!("trafgen failed ({}): {stderr}", out.status);
        }
        restarts += 1;
    }
}

/// wrk from namespace `ns`: two threads, 50 connections, each request on a new connection.
pub fn requests(ns: &str, dst: Ipv4Addr, secs: u64) -> Result<Generated> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "wrk", "-t2", "-c50", &format!("-d{secs}s"), "--timeout", "2s", "--latency"])
        .args(["-H", "Connection: close", &format!("http://{dst}:{HTTP_PORT}/")])
        .output()
        .context("running wrk")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("wrk failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    }
    let r = parse_wrk(&text).with_context(|| format!("unexpected wrk output:\n{text}"))?;
    Ok(Generated { done: r.rps * secs as f64, failed: r.errors as f64, rate: r.rps })
}

/// iperf3 from namespace `ns`: two parallel streams for `secs`.
pub fn streams(ns: &str, dst: Ipv4Addr, secs: u64) -> Result<Generated> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "iperf3", "-c", &dst.to_string(), "-p", &STREAM_PORT.to_string()])
        .args(["-t", &secs.to_string(), "-P", "2", "-J", "--connect-timeout", "3000"])
        .output()
        .context("running iperf3")?;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    if !out.status.success() || json.get("error").is_some() {
        bail!("iperf3 failed: {}{}", json["error"], String::from_utf8_lossy(&out.stderr));
    }
    let end = &json["end"];
    let sent = end["sum_sent"]["bytes"].as_f64().unwrap_or(0.0);
    let received = end["sum_received"]["bytes"].as_f64().unwrap_or(0.0);
    let bps = end["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0);
    Ok(Generated { done: received, failed: (sent - received).max(0.0), rate: bps / 1e9 })
}

/// Bounded wait between runs, so sockets of one run do not meet the next.
pub fn settle() {
    std::thread::sleep(Duration::from_millis(300));
}
