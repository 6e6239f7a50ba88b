//! The lab demo (`cargo xtask demo` runs this, as root): the balancer in the namespace lab
//! ([`lb_tests::lab`], namespaces `lbd-<pid>-*`, documentation addresses only), driven by its own
//! CLI. A client with 8 addresses (192.0.2.10-17), the balancer (`eth0`: 192.0.2.1 and
//! 198.51.100.1) running `lb-ctl attach eth0` with the XDP program in native mode, three
//! backends (198.51.100.11-13) running `lb-test-backend` on :8080.
//!
//! The demo sends bounded bursts of HTTP requests to the VIP 203.0.113.10:80 and to its IPv6
//! twin [2001:db8:a::10]:80 (the same backends by their IPv6 addresses, NAT66), kills a backend
//! and times the health checks taking it out, then adds it back with `lb-ctl backends add`.
//! Everything it creates is torn down at the end, on failure, and on Ctrl-C; leftovers of a
//! run that was killed outright are removed by the next run.
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use lb_ctl::state::Health;
use lb_tests::lab::{
    self, Daemon, LB_PORT, Lab, backend_addr, backend_addr6, client_addr, client_addr6, http_get, sibling_bin,
    wait_for_listener,
};

const VIP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 10), 80);
/// The same service over IPv6: a second VIP with the backends' IPv6 addresses.
const VIP6: SocketAddrV6 = SocketAddrV6::new(Ipv6Addr::new(0x2001, 0xdb8, 0xa, 0, 0, 0, 0, 0x10), 80, 0, 0);
const BACKENDS: usize = 3;
const CLIENTS: usize = 8;
/// Requests per burst (each a new connection).
const BURST: usize = 240;
const INTERVAL_MS: u64 = 300;
const TIMEOUT_MS: u64 = 200;
const RISE: u64 = 2;
const FALL: u64 = 3;

fn backend(i: usize) -> SocketAddr {
    SocketAddr::from((backend_addr(i), 8080))
}

fn step(what: &str) {
    println!("==> {what}");
}

fn check_interrupt() -> Result<()> {
    if lab::interrupted() {
        bail!("interrupted (Ctrl-C)");
    }
    Ok(())
}

fn main() -> Result<()> {
    ensure!(
        lb_tests::privileges::require_root("lb-demo"),
        "the demo creates network namespaces and loads XDP programs: run it as root"
    );
    lb_tests::netns::set_run_prefix("lbd");
    lab::catch_ctrl_c();
    // After Ctrl-C the lab's waits end by panicking (so everything is dropped and torn down):
    // that is no failure worth a backtrace.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !lab::interrupted() {
            default_hook(info);
        }
    }));
    let started = Instant::now();
    let result = match std::env::args().nth(1).as_deref() {
        Some("cluster") => demo_cluster(),
        _ => demo(),
    };
    match &result {
        Ok(()) => println!("\ndemo finished in {:.1} s", started.elapsed().as_secs_f64()),
        Err(e) => eprintln!("\ndemo stopped: {e:#}"),
    }
    let prefix = lb_tests::netns::run_name("");
    let left = leftovers(&prefix);
    if left.is_empty() {
        println!("torn down: no namespace, pin or file of this run is left");
    } else {
        eprintln!("warning: left behind: {left:?}");
    }
    result
}

/// Namespaces, pins and run directories named with this run's prefix that still exist.
fn leftovers(prefix: &str) -> Vec<String> {
    ["/run/netns", "/sys/fs/bpf", &std::env::temp_dir().to_string_lossy()]
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(prefix)))
        .map(|p| p.display().to_string())
        .collect()
}

/// `cargo xtask demo cluster`: the scale-out scenario ([`lb_tests::cluster::scenario`]).
fn demo_cluster() -> Result<()> {
    use lb_tests::cluster::scenario;
    step(&format!(
        "building the cluster lab: a router running BIRD (BGP, BFD, ECMP), {} balancer nodes each running `lb-ctl attach eth0` and BIRD (docs/bird.conf), {} DSR backends with `lb-ctl decap`, a client with {} addresses",
        scenario::NODES,
        scenario::BACKENDS,
        scenario::CLIENTS
    ));
    let backend_bin = sibling_bin("lb-test-backend");
    let options = scenario::Options { bfd: true, share: true, bad_peers: true };
    let (mut cluster, mut daemons) = scenario::start("", &backend_bin.to_string_lossy(), options);
    check_interrupt()?;
    step(
        "traffic through the router's ECMP route; mid-stream node 1 is killed, node 2 is drained, then a backend is removed on every node and node 3 is killed",
    );
    let out = scenario::run(&mut cluster, &mut daemons, options, &mut |line| println!("    {line}"));
    step(&format!(
        "{} long-lived connections, {} broken, {} of {} bytes lost; router failover: crash {} ms (BFD), drain {} ms; flows kept by flow sharing: {} of {}",
        out.connections,
        out.broken.len(),
        out.bytes_lost,
        out.bytes,
        out.crash_failover.as_millis(),
        out.drain_failover.as_millis(),
        out.moved_to_survivor - out.moved_broken,
        out.moved_to_survivor
    ));
    ensure!(out.broken.is_empty(), "broken connections: {:#?}", out.broken);
    drop(daemons);
    drop(cluster);
    demo_fleet(&backend_bin.to_string_lossy())
}

/// The second part of `demo cluster`: the same lab with a fleet in etcd
/// ([`lb_tests::fleet::scenario`]).
fn demo_fleet(backend_bin: &str) -> Result<()> {
    use lb_tests::fleet::{etcd::MEMBERS, scenario};
    const NODES: usize = 4;
    step(&format!(
        "the fleet: the same lab again with a {MEMBERS}-member etcd cluster (Debian's etcd, each member in a namespace of its own) on the segment, {NODES} nodes whose files hold no VIP and follow the fleet, its VIP pushed once with `lb-ctl fleet push`"
    ));
    let mut lab = scenario::start("f", backend_bin, NODES);
    check_interrupt()?;
    step(
        "while connections stream: a backend added once on node 0, the etcd leader killed, node 3 cut off from etcd while a backend is removed then rejoining, a malformed value put into etcd",
    );
    let out = scenario::run(&mut lab, &mut |line| println!("    {line}"));
    let sum =
        |f: &dyn Fn(&lb_tests::fleet::traffic::Tally) -> usize| out.steps.iter().map(|(_, t)| f(t)).sum::<usize>();
    step(&format!(
        "fleet: {} connections, {} broken, {} of {} bytes lost",
        sum(&|t| t.connections),
        sum(&|t| t.broken.len()),
        sum(&|t| t.bytes_lost),
        sum(&|t| t.bytes)
    ));
    ensure!(out.clean(), "broken connections: {:#?}", out.steps);
    Ok(())
}

fn demo() -> Result<()> {
    step(&format!(
        "building the lab: client ({CLIENTS} addresses), balancer, {BACKENDS} backends, one bridge (namespaces {}*)",
        lb_tests::netns::run_name("")
    ));
    let mut lab = Lab::new("", BACKENDS, CLIENTS);
    lab.enable_ipv6(CLIENTS);
    let mut backends: BTreeMap<usize, u32> = (0..BACKENDS).map(|i| (i, start_backend(&mut lab, i))).collect();
    lab.pass_on_switch_port(LB_PORT);
    lab.resolve_backends();
    lab.resolve_backends6();
    check_interrupt()?;

    step("starting the balancer: lb-ctl attach eth0 (in the balancer's namespace)");
    let mut d =
        Daemon::new(&lab.lb, "eth0", "ctl", &["--xdp-mode", "native", "--log-format", "text", "--log-level", "info"]);
    d.write_config_text(&config(&d));
    d.start();
    print_indented(&d.ok(&["status"]));
    let up = wait_health(&d, &(0..BACKENDS).collect::<Vec<_>>(), Health::Up)?;
    println!("all {BACKENDS} backends passed {RISE} health checks in a row after {} ms", up.as_millis());

    step(&format!(
        "{BURST} requests from {CLIENTS} client addresses to {VIP} (hash = \"ip\": each client sticks to one backend)"
    ));
    let burst = Burst::send(&lab, Family::V4)?;
    burst.print();
    ensure!(burst.errors.is_empty(), "requests failed: {:?}", burst.errors);
    step(&format!("the same over IPv6: {BURST} requests from {CLIENTS} IPv6 clients to {VIP6} (NAT66)"));
    let burst = Burst::send(&lab, Family::V6)?;
    burst.print();
    ensure!(burst.errors.is_empty(), "IPv6 requests failed: {:?}", burst.errors);
    ensure!(burst.answers.len() == BACKENDS, "IPv6 clients reached {} backends", burst.answers.len());
    print_indented(&d.ok(&["backends", "list"]));
    println!("why {} goes where it goes:", client_addr(0));
    print_indented(&d.ok(&["explain", "web", &client_addr(0).to_string()]));
    println!("and why {} goes where it goes over IPv6:", client_addr6(0));
    print_indented(&d.ok(&["explain", "web6", &client_addr6(0).to_string()]));

    let victim = 1;
    step(&format!("killing backend-{victim} ({})", backend(victim)));
    lab.kill(backends.remove(&victim).expect("running"));
    let down = wait_health(&d, &[victim], Health::Down)?;
    println!(
        "health checks took backend-{victim} out of the ring {} ms after it died \
         (a refused connection counts at once; a silent backend takes at most fall {FALL} x {INTERVAL_MS} ms + timeout {TIMEOUT_MS} ms = {} ms)",
        down.as_millis(),
        FALL * INTERVAL_MS + TIMEOUT_MS
    );
    for family in [Family::V4, Family::V6] {
        let burst = Burst::send(&lab, family)?;
        burst.print();
        ensure!(burst.errors.is_empty(), "requests failed after the failover: {:?}", burst.errors);
        ensure!(!burst.answers.contains_key(&format!("backend-{victim}")), "traffic still reached the dead backend");
    }
    println!("every request answered, over IPv4 and IPv6, none by backend-{victim}");

    step(&format!("bringing backend-{victim} back: lb-ctl backends remove, restart its server, lb-ctl backends add"));
    print_indented(&d.ok(&["backends", "remove", "web", &backend(victim).to_string()]));
    backends.insert(victim, start_backend(&mut lab, victim));
    print_indented(&d.ok(&["backends", "add", "web", &backend(victim).to_string()]));
    let rejoined = wait_health(&d, &[victim], Health::Up)?;
    println!(
        "backend-{victim} healthy and back in the ring {} ms after the add (rise {RISE} x {INTERVAL_MS} ms)",
        rejoined.as_millis()
    );
    let burst = Burst::send(&lab, Family::V4)?;
    burst.print();
    ensure!(burst.errors.is_empty(), "requests failed after the re-add: {:?}", burst.errors);
    ensure!(burst.answers.contains_key(&format!("backend-{victim}")), "the re-added backend got no traffic");
    print_indented(&d.ok(&["backends", "list"]));
    step("tearing down: daemon, backends, pins, namespaces");
    Ok(())
}

fn start_backend(lab: &mut Lab, i: usize) -> u32 {
    let ns = lab.backends[i].name.clone();
    let bin = sibling_bin("lb-test-backend");
    // [::] takes IPv4 and IPv6 connections alike.
    let pid = lab.spawn(&ns, &[bin.to_str().expect("utf-8 path"), "[::]:8080", &format!("backend-{i}")]);
    let _in = lab.backends[i].enter();
    wait_for_listener(backend(i), Duration::from_secs(10));
    pid
}

fn config(d: &Daemon) -> String {
    let vip = |name: &str, address: IpAddr, backends: Vec<String>| {
        format!(
            "\n[[vip]]\n\
             name = \"{name}\"\n\
             address = \"{address}\"\n\
             port = 80\n\
             protocol = \"tcp\"\n\
             forwarding = \"nat\"\n\
             hash = \"ip\"\n\
             health = {{ kind = \"http\", path = \"/health\", interval = \"{INTERVAL_MS}ms\", timeout = \"{TIMEOUT_MS}ms\", rise = {RISE}, fall = {FALL} }}\n\
             backends = [\n{}\n]\n",
            backends.join("\n")
        )
    };
    let backends = |address: &dyn Fn(usize) -> IpAddr| -> Vec<String> {
        (0..BACKENDS).map(|i| format!("  {{ address = \"{}\", port = 8080 }},", address(i))).collect()
    };
    format!(
        "# Written by `cargo xtask demo`.\n\
         [daemon]\n\
         api_socket = \"{}\"\n\
         flow_table_size = 65536\n{}{}",
        d.socket().display(),
        vip("web", IpAddr::V4(*VIP.ip()), backends(&|i| IpAddr::V4(backend_addr(i)))),
        // Dual stack: a second VIP, the same backends by their IPv6 addresses.
        vip("web6", IpAddr::V6(*VIP6.ip()), backends(&|i| IpAddr::V6(backend_addr6(i)))),
    )
}

fn print_indented(text: &str) {
    for line in text.lines() {
        println!("    {line}");
    }
}

/// Waits until the backends `which` are up and in the ring, or down and out of it; returns
/// how long that took.
fn wait_health(d: &Daemon, which: &[usize], want: Health) -> Result<Duration> {
    let started = Instant::now();
    for &i in which {
        check_interrupt()?;
        d.wait_for_backend(backend(i), Duration::from_secs(10), &format!("{want:?}"), |b| {
            b.health == want && b.in_ring == (want == Health::Up)
        });
    }
    Ok(started.elapsed())
}

/// Which of the two VIPs a burst goes to.
#[derive(Clone, Copy)]
enum Family {
    V4,
    V6,
}

/// One burst of requests from the client namespace, each a new connection, taking the client
/// addresses in turn; each gives up after 10 s.
#[derive(Default)]
struct Burst {
    took: Duration,
    answers: BTreeMap<String, usize>,
    clients: BTreeMap<String, BTreeSet<IpAddr>>,
    errors: Vec<String>,
}

impl Burst {
    fn send(lab: &Lab, family: Family) -> Result<Burst> {
        check_interrupt()?;
        let _in = lab.client.enter();
        let started = Instant::now();
        let mut burst = Burst::default();
        for n in 0..BURST {
            let (src, vip) = match family {
                Family::V4 => (IpAddr::V4(client_addr(n % CLIENTS)), SocketAddr::V4(VIP)),
                Family::V6 => (IpAddr::V6(client_addr6(n % CLIENTS)), SocketAddr::V6(VIP6)),
            };
            match http_get(src, vip, "/") {
                Ok((200, body)) => {
                    let name = String::from_utf8_lossy(&body).trim().to_string();
                    *burst.answers.entry(name.clone()).or_insert(0) += 1;
                    burst.clients.entry(name).or_default().insert(src);
                }
                Ok((status, _)) => burst.errors.push(format!("{src}: status {status}")),
                Err(e) => burst.errors.push(format!("{src}: {e}")),
            }
        }
        burst.took = started.elapsed();
        check_interrupt()?;
        Ok(burst)
    }

    fn print(&self) {
        let total: usize = self.answers.values().sum::<usize>() + self.errors.len();
        println!("{total} requests in {} ms, {} failed", self.took.as_millis(), self.errors.len());
        for (name, n) in &self.answers {
            let bar = "#".repeat(n * 40 / total.max(1));
            // Each client by the last part of its address.
            let clients: Vec<String> = self.clients[name]
                .iter()
                .map(|c| match c {
                    IpAddr::V4(v4) => format!(".{}", v4.octets()[3]),
                    IpAddr::V6(v6) => format!("::{:x}", v6.segments()[7]),
                })
                .collect();
            println!("    {name:<10} {n:>4}  {bar:<40}  clients {}", clients.join(" "));
        }
    }
}
