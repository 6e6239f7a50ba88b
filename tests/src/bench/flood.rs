//! `cargo xtask bench flood` (root): established keep-alive connections kept and broken under
//! a spoofed-SYN flood, with a backend added mid-flood, through lb-ctl (XDP NAT, connection
//! tables of 1 Ki and 256 Ki flows) and nftables DNAT with conntrack, in one namespace lab.
//! Each rate is run through every row in turn. Prints counts, asserts nothing.
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use anyhow::{Context, Result};
use lb_common::ip_proto;
use lb_common::stats::Counter;
use lb_common::vip::{forwarding, hash_mode};
use lb_ctl::dataplane::Dataplane;

use crate::balancer::{VipSpec, attach_ingress, configure};
use crate::flood::{Flood, FloodSent, FloodSpec, KeepAlive, LeakWatcher, mac_bytes};
use crate::lab::{self, Lab, backend_addr, mac_of, sibling_bin, wait_for_listener};

const RING: u32 = 65537;
const LB_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const NFT_VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 30);
/// Backend ports: lb-ctl's and nft's rows must not share 4-tuples (lb-ctl keeps a NAT flow's
/// reply entry after the connection ends).
const LB_PORT: u16 = 8080;
const NFT_PORT: u16 = 8081;
const BACKENDS: usize = 3;
const CONNECTIONS: usize = 10;
const TABLES: [u32; 2] = [1024, 262_144];

#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub seconds: u64,
    /// Paced flood rates (frames/s); a run as fast as one thread sends always follows.
    pub rates: &'static [u64],
}

impl Options {
    pub fn quick() -> Options {
        Options { seconds: 4, rates: &[] }
    }
}

impl Default for Options {
    fn default() -> Options {
        Options { seconds: 8, rates: &[50_000] }
    }
}

/// One run: a flood through one row.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    pub balancer: String,
    pub offered: String,
    pub sent_pps: f64,
    pub kept: usize,
    pub broken: usize,
    pub leaked: u64,
    pub notes: String,
}

pub fn run(options: Options) -> Result<Vec<Row>> {
    anyhow::ensure!(crate::privileges::require_root("lb-bench flood"), "the flood benchmark needs root");
    crate::netns::set_run_prefix("lbb");
    lab::catch_ctrl_c();
    let mut lab = Lab::new("fd", BACKENDS, CONNECTIONS);
    let backend_bin = sibling_bin("lb-test-backend");
    let backend_bin = backend_bin.to_str().context("backend path")?;
    for i in 0..BACKENDS {
        let ns = lab.backends[i].name.clone();
        for port in [LB_PORT, NFT_PORT] {
            lab.spawn(&ns, &[backend_bin, &format!("0.0.0.0:{port}"), &format!("backend-{i}")]);
        }
    }
    lab.pass_on_switch_port(lab::LB_PORT);
    lab.resolve_backends();
    for i in 0..BACKENDS {
        let _in = lab.backends[i].enter();
        for port in [LB_PORT, NFT_PORT] {
            wait_for_listener(SocketAddr::from((backend_addr(i), port)), Duration::from_secs(10));
        }
    }
    let nft = nft_ruleset(BACKENDS - 1);
    println!(
        "flood lab: {CONNECTIONS} keep-alive connections (a request every 300 ms), SYNs from 65,536 spoofed 5-tuples, \
         backend {BACKENDS} added halfway; {} s per run\n--- nft (conntrack table: the kernel's nf_conntrack_max, {}, \
         global: not settable per namespace) ---\n{nft}",
        options.seconds,
        conntrack_max()
    );
    let mut rows = Vec::new();
    let offered: Vec<Option<u64>> = options.rates.iter().copied().map(Some).chain([None]).collect();
    for rate in offered {
        for table in TABLES {
            lab::stop_if_interrupted();
            rows.push(through_lb_ctl(&lab, table, rate, options.seconds)?);
            print_row(rows.last().unwrap());
        }
        lab::stop_if_interrupted();
        rows.push(through_nft(&lab, rate, options.seconds)?);
        print_row(rows.last().unwrap());
    }
    Ok(rows)
}

fn print_row(r: &Row) {
    println!(
        "{:<30} {:<10} sent {:>8.0} pps  kept {:>2}  broken {:>2}  leaked {}  {}",
        r.balancer, r.offered, r.sent_pps, r.kept, r.broken, r.leaked, r.notes
    );
}

/// Keep-alive connections to `target`, a flood at `rate`, and `add_backend` halfway.
fn flood_run(lab: &Lab, target: SocketAddrV4, rate: Option<u64>, seconds: u64, add_backend: impl FnOnce()) -> Outcome {
    let client_ns = lab.client.name.clone();
    let leaks = LeakWatcher::start(&client_ns, (0..BACKENDS).map(backend_addr).collect());
    let connections = KeepAlive::start(&client_ns, target, CONNECTIONS);
    std::thread::sleep(Duration::from_secs(1));
    let duration = Duration::from_secs(seconds);
    let flood = Flood::start(
        &client_ns,
        FloodSpec {
            target: SocketAddrV4::new(*target.ip(), 80),
            src_mac: mac_bytes(&mac_of(&lab.client, "eth0")),
            dst_mac: mac_bytes(&mac_of(&lab.lb, "eth0")),
            rate,
            duration,
            max_frames: 50_000_000,
        },
    );
    std::thread::sleep(duration / 2);
    add_backend();
    let sent = flood.join();
    std::thread::sleep(Duration::from_secs(1));
    let broken = connections.stop();
    Outcome { sent, broken, leaked: leaks.stop() }
}

struct Outcome {
    sent: FloodSent,
    broken: Vec<String>,
    leaked: u64,
}

fn row(balancer: String, rate: Option<u64>, o: Outcome, notes: String) -> Row {
    let notes = match o.broken.first() {
        Some(first) => format!("{notes}; first broken: {first}"),
        None => notes,
    };
    Row {
        balancer,
        offered: rate.map_or("max".into(), |r| format!("{}k pps", r / 1000)),
        sent_pps: o.sent.pps(),
        kept: CONNECTIONS - o.broken.len(),
        broken: o.broken.len(),
        leaked: o.leaked,
        notes,
    }
}

fn through_lb_ctl(lab: &Lab, table: u32, rate: Option<u64>, seconds: u64) -> Result<Row> {
    let mut dp = attach_ingress(&lab.lb, RING, table)?;
    let spec = |backends: usize| VipSpec {
        id: 0,
        addr: LB_VIP,
        port: 80,
        protocol: ip_proto::TCP,
        forwarding: forwarding::NAT,
        hash: hash_mode::FLOW,
        encap_source: Ipv4Addr::new(198, 51, 100, 1),
        backends: (0..backends).map(|i| (i as u32, backend_addr(i), LB_PORT, 100)).collect(),
    };
    configure(&mut dp, RING, &[spec(BACKENDS - 1)]);
    let outcome =
        flood_run(lab, SocketAddrV4::new(LB_VIP, 80), rate, seconds, || configure(&mut dp, RING, &[spec(BACKENDS)]));
    let counters = dp.counters()?;
    let count = |c: Counter| counters.iter().find(|(k, _)| *k == c).map_or(0, |(_, v)| *v);
    let notes = format!(
        "new {} unrecorded {} set_proven {} table_full {} reverse_restored {}",
        count(Counter::FlowNew),
        count(Counter::FlowUnrecorded),
        count(Counter::FlowSetProven),
        count(Counter::FlowTableFull),
        count(Counter::ReverseRestored)
    );
    let name = format!("lb-ctl XDP NAT, {} Ki table", table / 1024);
    // Dropping the data plane detaches the program before the next row.
    drop(dp);
    Ok(row(name, rate, outcome, notes))
}

/// nftables DNAT with conntrack to `backends` backends, round robin (numgen), as an operator
/// would write it.
fn nft_ruleset(backends: usize) -> String {
    let map: Vec<String> = (0..backends).map(|i| format!("{i} : {}", backend_addr(i))).collect();
    format!(
        "table ip lbflood {{\n  chain prerouting {{\n    type nat hook prerouting priority dstnat; policy accept;\n    \
         ip daddr {NFT_VIP} tcp dport 80 dnat to numgen inc mod {backends} map {{ {} }} : {NFT_PORT}\n  }}\n}}\n",
        map.join(", ")
    )
}

fn load_nft(lab: &Lab, backends: usize) {
    let text = format!("table ip lbflood\ndelete table ip lbflood\n{}", nft_ruleset(backends));
    let path = std::env::temp_dir().join(format!("lbflood-{}.nft", std::process::id()));
    std::fs::write(&path, text).expect("writing the nft ruleset");
    let out = lab.lb.exec(&["nft", "-f", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success(), "nft -f: {}", String::from_utf8_lossy(&out.stderr));
}

fn through_nft(lab: &Lab, rate: Option<u64>, seconds: u64) -> Result<Row> {
    load_nft(lab, BACKENDS - 1);
    let before = conntrack_count(lab);
    let outcome = flood_run(lab, SocketAddrV4::new(NFT_VIP, 80), rate, seconds, || load_nft(lab, BACKENDS));
    let after = conntrack_count(lab);
    lab.lb.exec(&["nft", "delete", "table", "ip", "lbflood"]);
    // Entries of an earlier run age out by themselves (there is no conntrack tool to flush
    // them); the count says how full the table was.
    let notes = format!("conntrack entries: {before} before, {after} after");
    Ok(row("nft DNAT + conntrack".into(), rate, outcome, notes))
}

/// Conntrack entries in the balancer's namespace.
fn conntrack_count(lab: &Lab) -> String {
    let out = lab.lb.exec(&["cat", "/proc/sys/net/netfilter/nf_conntrack_count"]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn conntrack_max() -> String {
    std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_max").map_or("unknown".into(), |s| s.trim().into())
}
