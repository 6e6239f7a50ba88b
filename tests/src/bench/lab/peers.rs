//! The balancers compared, each on its own address in the balancer namespace so they can stay
//! set up side by side, configured as an operator would for the workload: lb-ctl (XDP, NAT
//! and DSR), nftables DNAT with conntrack, HAProxy in TCP mode and nginx stream (same worker
//! count: one per core), and plain routing to one backend as the floor.
use std::net::Ipv4Addr;
use std::path::Path;

use crate::bench::proxy::nginx_main;
use crate::lab::{LB_BACKEND_SIDE, backend_addr};

/// UDP port of the datagram workload, TCP ports of the request and stream workloads.
pub const UDP_PORT: u16 = 9000;
pub const HTTP_PORT: u16 = 80;
pub const STREAM_PORT: u16 = 5201;
/// The backends' ports behind lb-ctl's NAT VIPs. NAT rows must not share backend ports with
/// the other rows: lb-ctl keeps each NAT flow's reply direction (backend address and port to
/// client address and port) in its connection table after the connection ends, so a later
/// reply of another row on the same 4-tuple (the client reuses its ports) would get the VIP as
/// its source. DSR keeps no reply direction and uses the VIP's ports, as it must.
pub const NAT_HTTP_BACKEND_PORT: u16 = 8080;
pub const NAT_STREAM_BACKEND_PORT: u16 = 5202;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Peer {
    /// Plain routing through the balancer's namespace to one backend: the floor.
    Routing,
    LbNat,
    LbDsr,
    NftDnat,
    HaproxyTcp,
    NginxStream,
}

pub const PEERS: [Peer; 6] =
    [Peer::Routing, Peer::LbNat, Peer::LbDsr, Peer::NftDnat, Peer::HaproxyTcp, Peer::NginxStream];

impl Peer {
    pub fn name(self) -> &'static str {
        match self {
            Peer::Routing => "routing (floor)",
            Peer::LbNat => "lb-ctl XDP NAT",
            Peer::LbDsr => "lb-ctl XDP DSR",
            Peer::NftDnat => "nft DNAT",
            Peer::HaproxyTcp => "HAProxy tcp",
            Peer::NginxStream => "nginx stream",
        }
    }

    /// The address clients send to.
    pub fn address(self) -> Ipv4Addr {
        match self {
            Peer::Routing => backend_addr(0),
            Peer::LbNat => Ipv4Addr::new(203, 0, 113, 10),
            Peer::LbDsr => Ipv4Addr::new(203, 0, 113, 20),
            Peer::NftDnat => Ipv4Addr::new(203, 0, 113, 30),
            Peer::HaproxyTcp => Ipv4Addr::new(203, 0, 113, 40),
            Peer::NginxStream => Ipv4Addr::new(203, 0, 113, 50),
        }
    }

    /// Whether it forwards the UDP workload (the proxies are configured for TCP only).
    pub fn serves_udp(self) -> bool {
        !matches!(self, Peer::HaproxyTcp | Peer::NginxStream)
    }

    pub fn is_lb_ctl(self) -> bool {
        matches!(self, Peer::LbNat | Peer::LbDsr)
    }
}

fn backend_list(backends: usize, port: u16, line: impl Fn(usize, Ipv4Addr, u16) -> String) -> String {
    (0..backends).map(|i| line(i, backend_addr(i), port)).collect::<Vec<_>>().join("\n")
}

/// lb.toml: for NAT and DSR, a UDP VIP and a TCP VIP placed per flow, and a TCP VIP for the
/// streams placed per client address (iperf3's control and data connections must meet on one
/// backend). No health checks: the backends stay up for the whole run.
pub fn lb_toml(socket: &Path, backends: usize) -> String {
    let mut text = format!("[daemon]\napi_socket = \"{}\"\nflow_table_size = 262144\n", socket.display());
    for (peer, forwarding) in [(Peer::LbNat, "nat"), (Peer::LbDsr, "dsr-ipip")] {
        let encap = if peer == Peer::LbDsr { format!("encap_source = \"{LB_BACKEND_SIDE}\"\n") } else { String::new() };
        let nat = peer == Peer::LbNat;
        for (name, protocol, port, backend_port, hash) in [
            ("udp", "udp", UDP_PORT, UDP_PORT, "flow"),
            ("http", "tcp", HTTP_PORT, if nat { NAT_HTTP_BACKEND_PORT } else { HTTP_PORT }, "flow"),
            ("stream", "tcp", STREAM_PORT, if nat { NAT_STREAM_BACKEND_PORT } else { STREAM_PORT }, "ip"),
        ] {
            let list =
                backend_list(backends, backend_port, |_, a, p| format!("  {{ address = \"{a}\", port = {p} }},"));
            text.push_str(&format!(
                "\n[[vip]]\nname = \"{forwarding}-{name}\"\naddress = \"{}\"\nport = {port}\nprotocol = \"{protocol}\"\n\
                 forwarding = \"{forwarding}\"\nhash = \"{hash}\"\n{encap}backends = [\n{list}\n]\n",
                peer.address()
            ));
        }
    }
    text
}

/// The nftables DNAT ruleset (loaded only for its own runs: a nat chain turns conntrack on for
/// every packet of the namespace, which would tax the other rows).
pub fn nft_ruleset(backends: usize) -> String {
    let map = |port: u16| backend_list(backends, port, |i, a, p| format!("{i} : {a} . {p}")).replace('\n', ", ");
    let vip = Peer::NftDnat.address();
    format!(
        "table ip lbbench {{
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
        ip daddr {vip} udp dport {UDP_PORT} counter dnat ip to numgen random mod {backends} map {{ {} }}
        ip daddr {vip} tcp dport {HTTP_PORT} counter dnat ip to numgen random mod {backends} map {{ {} }}
        ip daddr {vip} tcp dport {STREAM_PORT} counter dnat ip to jhash ip saddr mod {backends} map {{ {} }}
    }}
}}
",
        map(UDP_PORT),
        map(HTTP_PORT),
        map(STREAM_PORT)
    )
}

/// HAProxy, TCP mode, one thread per core, round robin for requests and source hashing for
/// the streams.
pub fn haproxy_cfg(backends: usize, workers: usize) -> String {
    let vip = Peer::HaproxyTcp.address();
    let servers = |port: u16| backend_list(backends, port, |i, a, p| format!("    server b{i} {a}:{p}"));
    format!(
        "global
    nbthread {workers}
    maxconn 8000
defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend http_in
    bind {vip}:{HTTP_PORT}
    default_backend http_out
backend http_out
    balance roundrobin
{}
frontend stream_in
    bind {vip}:{STREAM_PORT}
    default_backend stream_out
backend stream_out
    balance source
{}
",
        servers(HTTP_PORT),
        servers(STREAM_PORT)
    )
}

/// nginx stream, one worker per core, round robin for requests and client-address hashing
/// for the streams.
pub fn nginx_conf(dir: &Path, backends: usize, workers: usize) -> String {
    let vip = Peer::NginxStream.address();
    let servers = |port: u16| backend_list(backends, port, |_, a, p| format!("        server {a}:{p};"));
    format!(
        "{}stream {{
    upstream http_out {{
{}
    }}
    upstream stream_out {{
        hash $remote_addr;
{}
    }}
    server {{
        listen {vip}:{HTTP_PORT} reuseport;
        proxy_pass http_out;
    }}
    server {{
        listen {vip}:{STREAM_PORT};
        proxy_pass stream_out;
    }}
}}
",
        nginx_main(dir, workers, 20000),
        servers(HTTP_PORT),
        servers(STREAM_PORT),
    )
}

/// The backends' ingress counter of the UDP workload, dropping what it counts (nothing listens
/// on the port, and answering with ICMP would load the client).
pub fn backend_counter_ruleset() -> String {
    format!(
        "table netdev lbbench {{
    counter udp_in {{ }}
    chain ingress {{
        type filter hook ingress device eth0 priority 0; policy accept;
        udp dport {UDP_PORT} counter name udp_in drop
    }}
}}
"
    )
}

/// Why IPVS has no row, when it has none.
pub fn ipvs_missing() -> Option<&'static str> {
    (!Path::new("/proc/net/ip_vs").exists())
        .then_some("not in this kernel (no CONFIG_IP_VS, and modules cannot be loaded)")
}
