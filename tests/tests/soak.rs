//! The soak run: the namespace lab under everything at once for `LB_SOAK_MINUTES` (default 2,
//! the seeded pass `cargo xtask test` runs; `cargo xtask soak --minutes N` for long runs),
//! with the fault schedule drawn from `LB_SOAK_SEED` (default 1).
//!
//! Load: keep-alive connections over the NAT VIP `web` and the DSR VIP `dsr` for the whole
//! run, and over the proxy VIP `proxy` from the daemon's restart on (the proxy is the daemon's
//! own: its `kill -9` ends the connections it holds, and the ones opened after must then last
//! to the end); short connections over `web`, `dsr`, `proxy` and the NAT VIP `flap`; and a SYN
//! flood at a steady rate. Faults, on a seeded schedule: reloads with a changing file (weights of
//! `web`, so its ring moves under the keep-alive connections), backend 2 killed and restarted
//! (`flap`'s only backend in the file), a backend added to and removed from `flap` through the
//! API (a new port each time), `node drain` (refused: nothing is announced) and `undrain`, and one `kill -9` of the daemon and
//! a restart.
//!
//! Every few seconds it samples the daemon's RSS, descriptors and tasks, the memory of the BPF
//! maps it holds (a map left behind by a reload or a restart would show as growth), the flow
//! table's occupancy, the log's growth, and the counters; at the end it reports (to
//! `LB_SOAK_REPORT` if set, and stdout) and fails if a resource grows without bound
//! (`lb_tests::soak`), a keep-alive connection broke (all of them are on backends that never
//! fail), a short connection to a healthy backend failed, or a NAT reply leaked. Needs root.
use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lb_tests::flood::{Flood, FloodSpec, KeepAlive, LeakWatcher, mac_bytes};
use lb_tests::lab::{
    Daemon, DecapPins, LB_BACKEND_SIDE, LB_CLIENT_SIDE, LB_PORT, Lab, backend_addr, client_addr, http_get, mac_of,
    wait_for_listener,
};
use lb_tests::netns::enter_named;
use lb_tests::privileges::require_root;
use lb_tests::soak::{Series, report};

const WEB: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const DSR: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
const FLAP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 30);
/// The proxy VIP: the balancer's own address on the client side (`LB_CLIENT_SIDE`).
const PROXY: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const PROXY_PORT: u16 = 8081;
const CLIENTS: usize = 16;
const KEEP_ALIVE: usize = 6;
const SAMPLE: Duration = Duration::from_secs(3);
const FAULT_EVERY: Duration = Duration::from_secs(4);
const FLOOD_PPS: u64 = 2000;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// lb.toml; `heavy` picks `web`'s weights (the reloads alternate it).
fn config(socket: &Path, heavy: usize) -> String {
    let health = "health = { kind = \"http\", path = \"/health\", interval = \"200ms\", timeout = \"100ms\", rise = 2, fall = 2 }";
    let web: Vec<String> = (0..2)
        .map(|i| {
            format!(
                "  {{ address = \"{}\", port = 8080, weight = {} }},",
                backend_addr(i),
                if i == heavy { 100 } else { 60 }
            )
        })
        .collect();
    format!(
        "[daemon]\napi_socket = \"{}\"\nflow_table_size = 4096\n\n\
         [[vip]]\nname = \"web\"\naddress = \"{WEB}\"\nport = 80\n{health}\nbackends = [\n{}\n]\n\n\
         [[vip]]\nname = \"dsr\"\naddress = \"{DSR}\"\nport = 80\nforwarding = \"dsr-ipip\"\nencap_source = \"{LB_BACKEND_SIDE}\"\n\
         backends = [ {{ address = \"{}\" }}, {{ address = \"{}\" }} ]\n\n\
         [[vip]]\nname = \"flap\"\naddress = \"{FLAP}\"\nport = 80\n{health}\n\
         backends = [ {{ address = \"{}\", port = 8080 }} ]\n\n\
         [[vip]]\nname = \"proxy\"\naddress = \"{LB_CLIENT_SIDE}\"\nport = {PROXY_PORT}\nprotocol = \"http\"\nforwarding = \"proxy\"\n\
         backends = [ {{ address = \"{}\", port = 8080 }}, {{ address = \"{}\", port = 8080 }} ]\n",
        socket.display(),
        web.join("\n"),
        backend_addr(0),
        backend_addr(1),
        backend_addr(2),
        backend_addr(0),
        backend_addr(1),
    )
}

/// A seeded xorshift: the fault schedule of a seed is the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn metrics(socket: &Path) -> String {
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(socket) else { return String::new() };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.write_all(b"GET /v1/metrics HTTP/1.0\r\nHost: lb\r\n\r\n");
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text
}

/// The value of the first metric line starting with `prefix`.
fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok())
}

/// `/proc/PID/status`'s VmRSS in KiB, and the counts of descriptors and tasks.
fn process(pid: u32) -> Option<(f64, f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    let count = |dir: &str| std::fs::read_dir(format!("/proc/{pid}/{dir}")).map(|d| d.count() as f64).ok();
    Some((rss, count("fd")?, count("task")?))
}

/// The memory the kernel charges for the BPF maps process `pid` holds, in KiB: the sum of
/// `memlock` over its descriptors that are maps (`map_type` in their fdinfo).
fn map_memory(pid: u32) -> Option<f64> {
    let mut bytes = 0u64;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()?.flatten() {
        let Ok(info) = std::fs::read_to_string(entry.path()) else { continue };
        if !info.lines().any(|l| l.starts_with("map_type:")) {
            continue;
        }
        let memlock = info.lines().find_map(|l| l.strip_prefix("memlock:")).and_then(|v| v.trim().parse::<u64>().ok());
        bytes += memlock.unwrap_or(0);
    }
    Some(bytes as f64 / 1024.0)
}

/// Short connections, one after another over every VIP, counted per VIP: ok, failed, and
/// failed while the daemon was down (the proxy VIP is served by the daemon itself, so a
/// `kill -9` takes it away until the restart).
struct Shorts {
    stop: Arc<AtomicBool>,
    counts: Arc<[[AtomicU64; 3]; 4]>,
    thread: std::thread::JoinHandle<()>,
}

const SHORT_TARGETS: [(&str, Ipv4Addr, u16); 4] =
    [("web", WEB, 80), ("dsr", DSR, 80), ("proxy", PROXY, PROXY_PORT), ("flap", FLAP, 80)];

impl Shorts {
    fn start(client_ns: &str, deadline: Instant, daemon_down: Arc<AtomicBool>) -> Shorts {
        let stop = Arc::new(AtomicBool::new(false));
        let counts: Arc<[[AtomicU64; 3]; 4]> = Arc::new(Default::default());
        let (s, c, ns) = (stop.clone(), counts.clone(), client_ns.to_string());
        let thread = std::thread::spawn(move || {
            let _in = enter_named(&ns);
            let mut i = 0usize;
            while !s.load(Ordering::Relaxed) && Instant::now() < deadline {
                let which = i % SHORT_TARGETS.len();
                let (_, addr, port) = SHORT_TARGETS[which];
                let ok = matches!(
                    http_get(client_addr(KEEP_ALIVE + i % (CLIENTS - KEEP_ALIVE)), SocketAddrV4::new(addr, port), "/"),
                    Ok((200, _))
                );
                let slot = match (ok, daemon_down.load(Ordering::Relaxed)) {
                    (true, _) => 0,
                    (false, false) => 1,
                    (false, true) => 2,
                };
                c[which][slot].fetch_add(1, Ordering::Relaxed);
                i += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Shorts { stop, counts, thread }
    }

    fn finish(self) -> Vec<(&'static str, u64, u64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        SHORT_TARGETS
            .iter()
            .zip(self.counts.iter())
            .map(|((name, _, _), c)| {
                let n = |i: usize| c[i].load(Ordering::Relaxed);
                (*name, n(0), n(1), n(2))
            })
            .collect()
    }
}

#[test]
fn soak() {
    if !require_root("soak") {
        return;
    }
    let minutes = env_u64("LB_SOAK_MINUTES", 2);
    let seed = env_u64("LB_SOAK_SEED", 1);
    let run = Duration::from_secs(minutes * 60);
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let backend_bin = Path::new(env!("CARGO_BIN_EXE_lb-test-backend"));
    let mut lab = Lab::new("sk", 4, CLIENTS);
    let mut decaps = DecapPins::default();
    let mut flapper = 0;
    for i in 0..4 {
        let ns = lab.backends[i].name.clone();
        let pid = lab.spawn(&ns, &[backend_bin.to_str().unwrap(), "0.0.0.0:8080", &format!("backend-{i}")]);
        if i == 2 {
            flapper = pid;
        }
        if i < 2 {
            lab.dsr_backend(i, DSR, 80, backend_bin, &mut decaps);
        }
        let _in = lab.backends[i].enter();
        wait_for_listener(SocketAddr::from((backend_addr(i), 8080)), Duration::from_secs(10));
    }
    lab.pass_on_switch_port(LB_PORT);
    lab.resolve_backends();
    let cns = lab.client.name.clone();
    let mut d = Daemon::new(&lab.lb, "eth0", "sk", &["--xdp-mode", "native", "--log-level", "info"]);
    let mut heavy = 0;
    d.write_config_text(&config(&d.socket(), heavy));
    d.start();
    std::thread::sleep(Duration::from_secs(2));

    let started = Instant::now();
    let deadline = started + run;
    let leaks = LeakWatcher::start(&cns, (0..4).map(backend_addr).collect());
    let web_conns = KeepAlive::start(&cns, SocketAddrV4::new(WEB, 80), KEEP_ALIVE / 2);
    let dsr_conns = KeepAlive::start(&cns, SocketAddrV4::new(DSR, 80), KEEP_ALIVE / 2);
    let daemon_down = Arc::new(AtomicBool::new(false));
    let shorts = Shorts::start(&cns, deadline, daemon_down.clone());
    let flood = Flood::start(
        &cns,
        FloodSpec {
            target: SocketAddrV4::new(WEB, 80),
            src_mac: mac_bytes(&mac_of(&lab.client, "eth0")),
            dst_mac: mac_bytes(&mac_of(&lab.lb, "eth0")),
            rate: Some(FLOOD_PPS),
            duration: run,
            max_frames: FLOOD_PPS * run.as_secs() + FLOOD_PPS,
        },
    );

    let mut rss = Series::new("daemon RSS", "KiB", 4096.0, 0.10);
    let mut fds = Series::new("daemon descriptors", "fds", 8.0, 0.10);
    let mut tasks = Series::new("daemon tasks", "tasks", 4.0, 0.10);
    let mut map_kib = Series::new("BPF map memory held by the daemon", "KiB", 64.0, 0.05);
    let mut flows = Series::new("flow table entries", "ways", 256.0, 0.10);
    let mut evictions = Series::new("flow table evictions (flow_table_full)", "per s", 2000.0, 0.5);
    let mut log_rate = Series::new("log volume", "bytes/s", 512.0, 0.5);
    let mut series_count = Series::new("metric series", "lines", 16.0, 0.10);
    let mut events: BTreeMap<&str, u32> = BTreeMap::new();
    let (mut last_log, mut last_evicted, mut last_t) = (0u64, None::<f64>, 0.0);
    let (mut next_sample, mut next_fault) = (started, started + FAULT_EVERY);
    let (mut killed, mut flapped_down, mut added, mut api_port) = (false, false, false, 0u32);
    let kill_at = started + run / 3;
    let mut proxy_conns = None;
    while Instant::now() < deadline {
        lb_tests::lab::stop_if_interrupted();
        let now = Instant::now();
        if now >= next_sample {
            next_sample += SAMPLE;
            let t = now.duration_since(started).as_secs_f64();
            if let Some((r, f, k)) = d.pid().and_then(process) {
                // A restarted daemon starts its own series: the slope is judged on the
                // longest life (after the kill, two thirds of the run).
                if killed && rss.points.last().is_some_and(|p| p.0 < kill_at.duration_since(started).as_secs_f64()) {
                    rss.points.clear();
                    fds.points.clear();
                    tasks.points.clear();
                    series_count.points.clear();
                    map_kib.points.clear();
                }
                if let Some(kib) = d.pid().and_then(map_memory) {
                    map_kib.push(t, kib);
                }
                rss.push(t, r);
                fds.push(t, f);
                tasks.push(t, k);
            }
            let text = metrics(&d.socket());
            if let Some(v) = metric(&text, "lb_flow_table_entries") {
                flows.push(t, v);
            }
            series_count.push(t, text.lines().filter(|l| !l.starts_with('#')).count() as f64);
            if let Some(v) = metric(&text, "lb_dataplane_packets_total{verdict=\"flow_table_full\"}") {
                if let Some(prev) = last_evicted.filter(|p| *p <= v) {
                    evictions.push(t, (v - prev) / (t - last_t).max(0.1));
                }
                last_evicted = Some(v);
            }
            let log = std::fs::metadata(d.log()).map(|m| m.len()).unwrap_or(0);
            if last_t > 0.0 && log >= last_log {
                log_rate.push(t, (log - last_log) as f64 / (t - last_t).max(0.1));
            }
            last_log = log;
            last_t = t;
        }
        if !killed && now >= kill_at {
            killed = true;
            daemon_down.store(true, Ordering::Relaxed);
            d.kill9();
            d.start();
            // The proxy VIP listens once the daemon's start has applied the file.
            std::thread::sleep(Duration::from_secs(1));
            daemon_down.store(false, Ordering::Relaxed);
            {
                let _in = enter_named(&cns);
                wait_for_listener(SocketAddr::from((PROXY, PROXY_PORT)), Duration::from_secs(10));
            }
            proxy_conns =
                Some(KeepAlive::start_per_request(&cns, SocketAddrV4::new(PROXY, PROXY_PORT), KEEP_ALIVE / 2));
            *events.entry("daemon kill -9 and restart").or_default() += 1;
            last_evicted = None;
            last_log = std::fs::metadata(d.log()).map(|m| m.len()).unwrap_or(0);
        } else if now >= next_fault {
            next_fault += FAULT_EVERY;
            match rng.next(5) {
                0 | 1 => {
                    heavy = 1 - heavy;
                    d.write_config_text(&config(&d.socket(), heavy));
                    d.ok(&["reload"]);
                    // A reload makes the file the truth: it undoes the API's add.
                    if added {
                        added = false;
                        api_port += 1;
                    }
                    *events.entry("reload (web's weights changed)").or_default() += 1;
                }
                2 => {
                    if flapped_down {
                        let ns = lab.backends[2].name.clone();
                        flapper = lab.spawn(&ns, &[backend_bin.to_str().unwrap(), "0.0.0.0:8080", "backend-2"]);
                        *events.entry("backend 2 restarted").or_default() += 1;
                    } else {
                        lab.kill(flapper);
                        *events.entry("backend 2 killed").or_default() += 1;
                    }
                    flapped_down = !flapped_down;
                }
                3 => {
                    // A new port each time (nothing listens there: it never passes its check),
                    // so a series left behind by a removed backend would pile up.
                    let address = format!("{}:{}", backend_addr(3), 9000 + api_port);
                    if added {
                        d.ok(&["backends", "remove", "flap", &address]);
                        api_port += 1;
                        *events.entry("a backend removed through the API").or_default() += 1;
                    } else {
                        d.ok(&["backends", "add", "flap", &address]);
                        *events.entry("a backend added through the API").or_default() += 1;
                    }
                    added = !added;
                }
                _ => {
                    // No VIP here is announced (that takes the cluster lab's routers), so a
                    // node drain would change nothing: it is refused, and serving goes on.
                    let out = d.ctl(&["node", "drain"]);
                    assert!(!out.status.success(), "a node drain with nothing announced is refused");
                    d.ok(&["node", "undrain"]);
                    *events.entry("node drain refused (nothing announced), undrain").or_default() += 1;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let sent = flood.stop();
    let shorts = shorts.finish();
    let broken_web = web_conns.stop();
    let broken_dsr = dsr_conns.stop();
    let proxy_conns = proxy_conns.expect("the daemon was restarted, and the proxy connections opened");
    let proxy_requests = proxy_conns.requests.load(Ordering::Relaxed);
    let broken_proxy = proxy_conns.stop();
    let leaked = leaks.stop();
    let text = metrics(&d.socket());
    let counters: Vec<(String, u64)> = text
        .lines()
        .filter(|l| l.starts_with("lb_dataplane_packets_total{"))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.trim_start_matches("lb_dataplane_packets_total").to_string(), value.parse::<f64>().ok()? as u64))
        })
        .filter(|(_, v)| *v > 0)
        .collect();

    let mut connections: Vec<(String, u64)> = vec![
        ("keep-alive connections over web (NAT) broken".into(), broken_web.len() as u64),
        ("keep-alive connections over dsr (DSR) broken".into(), broken_dsr.len() as u64),
        ("keep-alive connections over proxy (opened after the restart) broken".into(), broken_proxy.len() as u64),
        ("requests on the proxy keep-alive connections".into(), proxy_requests),
        ("NAT replies leaked with a backend's address".into(), leaked),
        ("spoofed SYNs sent".into(), sent.frames),
    ];
    for (name, ok, failed, while_down) in &shorts {
        let expected = if *name == "flap" { " (backend killed or removed: expected)" } else { "" };
        connections.push((format!("short connections to {name}: ok"), *ok));
        connections.push((format!("short connections to {name}: failed{expected}"), *failed));
        connections.push((format!("short connections to {name}: failed while the daemon was down"), *while_down));
    }
    for (event, n) in &events {
        connections.push((format!("fault: {event}"), u64::from(*n)));
    }
    let series = [rss, fds, tasks, map_kib, series_count, flows, evictions, log_rate];
    let settings = format!(
        "{minutes} minutes, seed {seed}; the namespace lab (4 backends, {CLIENTS} client addresses, 2 cores shared); \
         a sample every {} s, a fault every {} s; SYN flood at {FLOOD_PPS} pps; flow_table_size 4096.",
        SAMPLE.as_secs(),
        FAULT_EVERY.as_secs()
    );
    let mut text = report(&settings, &connections, &series, &counters);
    println!("{text}");
    if let Some(path) = std::env::var_os("LB_SOAK_REPORT").map(std::path::PathBuf::from) {
        // The charts go in `soak/` beside the report, linked relative to it: the report and
        // its directory move together (docs/benchmarks.md and docs/soak/).
        let charts = path.parent().unwrap_or(Path::new(".")).join("soak");
        std::fs::create_dir_all(&charts).unwrap();
        text.push_str("\n### Charts\n\n");
        for s in &series {
            std::fs::write(charts.join(format!("{}.svg", s.slug())), s.svg_chart().unwrap()).unwrap();
            text.push_str(&format!("![{}](soak/{}.svg)\n", s.name, s.slug()));
        }
        std::fs::write(&path, &text).unwrap();
    }
    let unbounded: Vec<String> = series.iter().filter_map(Series::unbounded).collect();
    assert!(unbounded.is_empty(), "resources growing without bound:\n{}", unbounded.join("\n"));
    assert!(
        broken_web.is_empty() && broken_dsr.is_empty() && broken_proxy.is_empty(),
        "keep-alive connections broke:\n{broken_web:?}\n{broken_dsr:?}\n{broken_proxy:?}"
    );
    assert!(proxy_requests > 0, "no request went over the proxy keep-alive connections");
    assert_eq!(leaked, 0, "NAT replies leaked");
    for (name, ok, failed, while_down) in shorts {
        assert!(ok > 0, "no short connection to {name} succeeded");
        // The XDP VIPs forward while the daemon is down; the proxy VIP is the daemon's own.
        let counted = match name {
            "flap" => 0,
            "proxy" => failed,
            _ => failed + while_down,
        };
        assert_eq!(counted, 0, "short connections to {name} (healthy backends only) failed");
    }
}
