//! Control-plane benchmark (`cargo xtask bench control`, root). Prints figures, asserts nothing.
//!
//! 1. `lb-ctl backends remove` to the map change: the real daemon runs on `lo` of a namespace of
//!    its own (skb mode; no traffic is involved), and a thread polls the pinned RINGS map at the
//!    ring slot the removed backend's change reaches last (the daemon writes changed slots in
//!    ascending order). Reported: how long the CLI call took, and when the slot changed relative
//!    to the call returning (negative: already visible when it returned).
//! 2. Maglev ring build (lb_common::maglev::build_ring) for 1000 backends, table 65537.
//! 3. Daemon RSS at rest with 64 VIPs x 64 backends (MAX_VIPS is 64 and MAX_BACKENDS 4096 in
//!    all, so 64 x 100 does not fit), unchecked backends, next to 1 VIP x 1 backend.
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use aya::maps::{Array, Map, MapData};
use lb_common::backend::BACKEND_NONE;
use lb_common::maglev::{RingMember, build_ring};
use lb_common::map_names;
use lb_ctl::api::types::{BackendView, VipView};

use crate::lab::Daemon;
use crate::netns::Netns;
use crate::privileges::require_root;

const RING: u32 = 65537;
const ROUNDS: usize = 20;

pub fn run() -> anyhow::Result<()> {
    anyhow::ensure!(require_root("lb-bench control"), "the control-plane benchmark needs root");
    maglev();
    let ns = Netns::new("bc");
    remove_to_map(&ns);
    rss(&ns);
    Ok(())
}

fn percentiles(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!("median {:.2}  p90 {:.2}  min {:.2}  max {:.2}", at(0.5), at(0.9), v[0], v[v.len() - 1])
}

fn maglev() {
    println!("== Maglev ring build (lb_common::maglev::build_ring), table {RING}");
    for n in [100usize, 1000] {
        let keys: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let addr = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 51, 100, 0)) + i as u32);
                [&addr.octets()[..], &8080u16.to_be_bytes()].concat()
            })
            .collect();
        let members: Vec<RingMember> =
            keys.iter().enumerate().map(|(i, key)| RingMember { id: i as u32, weight: 100, key }).collect();
        let mut times = Vec::new();
        for _ in 0..15 {
            let t = Instant::now();
            let ring = build_ring(&members, RING);
            times.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(ring.iter().all(|&id| id != BACKEND_NONE), "ring has an empty slot");
        }
        println!("   {n:>4} backends, equal weights: ms {}   (target < 50 ms for 1000)", percentiles(times));
    }
}

/// A daemon on `lo` of namespace `ns` (skb mode: no traffic is involved) with `vips_toml`;
/// returns it and how long it took to answer. Stopped and detached on drop.
fn start_daemon(ns: &Netns, tag: &str, vips_toml: &str) -> (Daemon, Duration) {
    let mut d = Daemon::new(ns, "lo", tag, &["--xdp-mode", "skb", "--log-level", "warn", "--enable-forwarding"]);
    d.write_config_text(&format!(
        "[daemon]\napi_socket = \"{}\"\nring_size = {RING}\nflow_table_size = 65536\nnexthop_ttl = \"0s\"\n\n{vips_toml}",
        d.socket().display()
    ));
    let started = d.start();
    (d, started)
}

fn rss_kib(d: &Daemon) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid().expect("the daemon runs"))).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

fn backend_line(addr: Ipv4Addr, port: u16) -> String {
    format!("  {{ address = \"{addr}\", port = {port} }},")
}

fn remove_to_map(ns: &Netns) {
    const N: usize = 10;
    println!(
        "== lb-ctl backends remove -> ring change visible in the pinned map (1 VIP, {N} backends, ring {RING}, {ROUNDS} rounds)"
    );
    let backends: Vec<String> = (0..N).map(|i| backend_line(Ipv4Addr::new(198, 51, 100, 11 + i as u8), 8080)).collect();
    let vip = format!(
        "[[vip]]\nname = \"web\"\naddress = \"203.0.113.10\"\nport = 80\nbackends = [\n{}\n]\n",
        backends.join("\n")
    );
    let (d, _) = start_daemon(ns, "bcr", &vip);
    let vips: Vec<VipView> = serde_json::from_str(&d.ok(&["vips", "list", "--json"])).unwrap();
    let base = vips[0].id * RING;
    let rings = MapData::from_pin(d.pins().join(map_names::RINGS)).expect("pinned RINGS");
    let rings: Array<MapData, u32> = Array::try_from(Map::Array(rings)).unwrap();
    let victim = "198.51.100.11:8080";
    let backend_id = || -> Option<u32> {
        let list: Vec<BackendView> = serde_json::from_str(&d.ok(&["backends", "list", "--json"])).unwrap();
        list.iter().find(|b| b.address.to_string() == victim).map(|b| b.id)
    };
    // The last slot (highest index) the victim holds: the ring write reaches it last.
    let id = backend_id().unwrap();
    let last = (0..RING).rev().find(|&s| rings.get(&(base + s), 0).unwrap() == id).expect("victim in the ring");
    let changed_slots = (0..RING).filter(|&s| rings.get(&(base + s), 0).unwrap() == id).count();
    println!("   the removed backend holds {changed_slots} slots; watching slot {last}");
    let (mut calls, mut visible, mut adds) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let id = backend_id().unwrap();
        assert_eq!(rings.get(&(base + last), 0).unwrap(), id);
        let (seen_tx, seen_rx) = std::sync::mpsc::channel();
        let path = d.pins().join(map_names::RINGS);
        let poller = std::thread::spawn(move || {
            let map = MapData::from_pin(path).unwrap();
            let map: Array<MapData, u32> = Array::try_from(Map::Array(map)).unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            seen_tx.send(()).unwrap();
            while Instant::now() < deadline {
                if map.get(&(base + last), 0).unwrap() != id {
                    return Some(Instant::now());
                }
            }
            None
        });
        seen_rx.recv().unwrap();
        let t0 = Instant::now();
        d.ok(&["backends", "remove", "web", victim]);
        let returned = Instant::now();
        let seen = poller.join().unwrap().expect("the ring slot never changed");
        calls.push((returned - t0).as_secs_f64() * 1e3);
        let after = if seen >= returned {
            (seen - returned).as_secs_f64() * 1e3
        } else {
            -((returned - seen).as_secs_f64() * 1e3)
        };
        visible.push(after);
        // Add it back (unchecked: straight into the ring) and wait for the slot to hold it.
        let t0 = Instant::now();
        d.ok(&["backends", "add", "web", victim]);
        let new_id = backend_id().unwrap();
        while rings.get(&(base + last), 0).unwrap() != new_id {
            assert!(t0.elapsed() < Duration::from_secs(5), "re-added backend not back in slot {last}");
        }
        adds.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    println!("   lb-ctl backends remove, whole call (process start to exit), ms: {}", percentiles(calls));
    println!(
        "   slot changed relative to the call returning, ms (negative = before it returned): {}   (target < 10 ms)",
        percentiles(visible)
    );
    println!("   lb-ctl backends add + lb-ctl backends list + slot back, ms: {}", percentiles(adds));
}

fn rss(ns: &Netns) {
    println!("== daemon RSS at rest (no health checks; XDP in skb mode on lo of a private namespace)");
    let one = "[[vip]]\nname = \"one\"\naddress = \"203.0.113.1\"\nport = 80\nbackends = [ { address = \"198.51.100.11\", port = 8080 } ]\n";
    let mut many = String::new();
    let (vips, per_vip) = (lb_common::limits::MAX_VIPS as usize, lb_common::limits::MAX_BACKENDS as usize / 64);
    for v in 0..vips {
        let backends: Vec<String> =
            (0..per_vip).map(|b| backend_line(Ipv4Addr::new(198, 51, 100, 1 + b as u8), 8000 + v as u16)).collect();
        many.push_str(&format!(
            "[[vip]]\naddress = \"203.0.113.{}\"\nport = 80\nbackends = [\n{}\n]\n\n",
            v + 1,
            backends.join("\n")
        ));
    }
    for (label, toml, tag) in
        [("1 VIP x 1 backend", one.to_string(), "bc1"), (&*format!("{vips} VIPs x {per_vip} backends"), many, "bcm")]
    {
        let (d, started) = start_daemon(ns, tag, &toml);
        std::thread::sleep(Duration::from_secs(2));
        let rss = rss_kib(&d);
        println!(
            "   {label:<24} start to answering {:>6.0} ms, RSS {:>7.1} MiB",
            started.as_secs_f64() * 1e3,
            rss as f64 / 1024.0
        );
    }
    println!("   (MAX_VIPS = 64 and MAX_BACKENDS = 4096 in all: 64 x 100 does not fit, 64 x 64 is the full table)");
}
