//! The first hour of a newcomer: the README's quick starts run as written (the command lines
//! are read from README.md, so the front page cannot break unnoticed), with the host defaults
//! they rely on (no --socket, --pin-dir or --state-dir), and the mistakes a newcomer makes on
//! the way that the balancer must catch. Needs root, like every namespace suite.
use std::io::{BufRead as _, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use lb_tests::lab::{Lab, backend_addr, client_addr, http_get, wait_for_listener};
use lb_tests::netns::{Netns, die_with_parent};
use lb_tests::privileges::require_root;

const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);

/// The command lines of the README's code block that holds a line starting with `first`:
/// `sudo` and comments dropped, as a newcomer running as root types them.
fn readme_commands(first: &str) -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap();
    let blocks: Vec<Vec<Vec<String>>> = readme
        .split("```")
        .skip(1)
        .step_by(2)
        .map(|block| {
            block
                .lines()
                .skip(1)
                .map(|l| l.split('#').next().unwrap().trim())
                .filter(|l| !l.is_empty())
                .map(|l| l.strip_prefix("sudo ").unwrap_or(l).split_whitespace().map(String::from).collect())
                .collect()
        })
        .collect();
    blocks
        .into_iter()
        .find(|b| b.iter().any(|c| c.join(" ").starts_with(first)))
        .unwrap_or_else(|| panic!("README.md has no code block with `{first}`"))
}

/// The command, with `lb-ctl` being the binary under test, run in network namespace `ns` as
/// the docs say (`nsenter --net`), from `dir`.
fn command(ns: &Netns, line: &[String], dir: &Path) -> Command {
    assert_eq!(line[0], "lb-ctl", "a quick start line runs lb-ctl: {line:?}");
    let mut c = Command::new("nsenter");
    c.arg(format!("--net=/run/netns/{}", ns.name)).arg(lb_tests::lb_ctl_bin()).args(&line[1..]).current_dir(dir);
    c.env("NO_COLOR", "1").env_remove("LB_CTL_SOCKET").stdin(Stdio::null());
    c
}

fn run(ns: &Netns, line: &[String], dir: &Path) -> Output {
    let out = command(ns, line, dir).output().expect("running lb-ctl");
    assert!(
        out.status.success(),
        "`{}` failed ({}):\n{}{}",
        line.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The line of `commands` whose first words are `words`.
fn line<'a>(commands: &'a [Vec<String>], words: &str) -> &'a [String] {
    commands
        .iter()
        .find(|c| c.join(" ").starts_with(words))
        .unwrap_or_else(|| panic!("no `{words}` in the quick start: {commands:?}"))
}

/// A daemon started by a quick start line, stopped (SIGTERM, as Ctrl-C or systemd) on drop.
struct Running(Child);

impl Running {
    fn start(mut command: Command, log: &Path) -> Running {
        let file = std::fs::File::create(log).unwrap();
        command.stdout(file.try_clone().unwrap()).stderr(file);
        Running(die_with_parent(&mut command).spawn().expect("starting the daemon"))
    }

    /// Waits until `ready` holds, failing with the daemon's log if it exits or takes a minute.
    fn wait_until(&mut self, log: &Path, mut ready: impl FnMut() -> bool) {
        let started = Instant::now();
        while !ready() {
            if let Some(status) = self.0.try_wait().unwrap() {
                panic!("the daemon exited with {status}:\n{}", std::fs::read_to_string(log).unwrap_or_default());
            }
            assert!(started.elapsed() < Duration::from_secs(60), "not ready in a minute:\n{}", {
                std::fs::read_to_string(log).unwrap_or_default()
            });
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on the pid of our own child, not reaped yet.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        self.0.wait().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            self.stop();
        }
    }
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_readme_proxy_quick_start_serves() {
    if !require_root("the_readme_proxy_quick_start_serves") {
        return;
    }
    let commands = readme_commands("lb-ctl proxy");
    let proxy = line(&commands, "lb-ctl proxy");
    let flag = |name: &str| -> Vec<SocketAddr> {
        proxy.windows(2).filter(|w| w[0] == name).map(|w| w[1].parse().expect("an address")).collect()
    };
    let (listen, backends) = (flag("--listen")[0], flag("--backend"));
    assert_eq!(backends.len(), 2, "the quick start names two backends");
    let ns = Netns::new("fhp");
    let dir = tempfile::tempdir().unwrap();
    let mut servers: Vec<Running> = Vec::new();
    for (i, b) in backends.iter().enumerate() {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", ns.name)).args([
            env!("CARGO_BIN_EXE_lb-test-backend"),
            &b.to_string(),
            &format!("backend-{i}"),
        ]);
        servers.push(Running::start(c, &dir.path().join(format!("backend-{i}.log"))));
    }
    let _inside = ns.enter();
    for b in &backends {
        wait_for_listener(*b, Duration::from_secs(10));
    }
    let log = dir.path().join("proxy.log");
    let mut daemon = Running::start(command(&ns, proxy, dir.path()), &log);
    daemon.wait_until(&log, || std::net::TcpStream::connect(listen).is_ok());

    let mut answered = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let (status, body) = http_get(listen.ip(), listen, "/").expect("a request through the proxy");
        assert_eq!(status, 200);
        answered.insert(String::from_utf8_lossy(&body).trim().to_string());
    }
    assert_eq!(answered.len(), 2, "both backends answer: {answered:?}");
    // "`backends` commands and `stats` work as for XDP VIPs": without --socket, as typed.
    let list = text(&run(&ns, &["lb-ctl".into(), "backends".into(), "list".into()], dir.path()));
    for b in &backends {
        assert!(list.contains(&b.to_string()), "backends list shows {b}:\n{list}");
    }
    let stats = text(&run(&ns, &["lb-ctl".into(), "stats".into()], dir.path()));
    assert!(stats.contains("REQUESTS"), "stats shows the proxy's requests:\n{stats}");
    assert!(!stats.contains("COUNTER"), "a proxy-only daemon has no XDP counters:\n{stats}");
    // A backend that stops is shown down by `backends list`, and still listed by `stats`.
    servers.truncate(1);
    let run_list = || text(&run(&ns, &["lb-ctl".into(), "backends".into(), "list".into()], dir.path()));
    daemon
        .wait_until(&log, || run_list().lines().any(|l| l.contains(&backends[1].to_string()) && l.contains(" down ")));
    let stats = text(&run(&ns, &["lb-ctl".into(), "stats".into()], dir.path()));
    assert!(stats.contains(&backends[1].to_string()), "stats lists the down backend:\n{stats}");
    let status = daemon.stop();
    assert!(status.success(), "the proxy stops cleanly on SIGTERM: {status}");
}

/// The XDP quick start's lb.toml: one NAT VIP on the lab's two backends.
fn xdp_lb_toml() -> String {
    format!(
        "[[vip]]\nname = \"web\"\naddress = \"{VIP}\"\nport = 80\n\
         health = {{ kind = \"http\", path = \"/health\", interval = \"300ms\", timeout = \"250ms\" }}\n\
         backends = [\n  {{ address = \"{}\", port = 8080 }},\n  {{ address = \"{}\", port = 8080 }},\n]\n",
        backend_addr(0),
        backend_addr(1)
    )
}

#[test]
fn the_readme_xdp_quick_start_serves() {
    if !require_root("the_readme_xdp_quick_start_serves") {
        return;
    }
    let commands = readme_commands("lb-ctl attach");
    let mut lab = Lab::new("fhx", 2, 1);
    lab.serve_test_backends(env!("CARGO_BIN_EXE_lb-test-backend"), 2);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lb.toml"), xdp_lb_toml()).unwrap();

    let validated = text(&run(&lab.lb, line(&commands, "lb-ctl validate"), dir.path()));
    assert!(validated.contains("ok"), "validate says the file is fine: {validated}");
    let log = dir.path().join("attach.log");
    let attach = line(&commands, "lb-ctl attach");
    let mut daemon = Running::start(command(&lab.lb, attach, dir.path()), &log);
    let list = line(&commands, "lb-ctl backends list");
    daemon.wait_until(&log, || {
        let out = command(&lab.lb, list, dir.path()).output().unwrap();
        out.status.success() && text(&out).matches(" up ").count() == 2
    });
    let listed = text(&run(&lab.lb, list, dir.path()));
    for i in 0..2 {
        assert!(listed.contains(&backend_addr(i).to_string()), "backends list shows backend {i}:\n{listed}");
    }
    {
        let _in = lab.client.enter();
        for _ in 0..5 {
            let (status, _) = http_get(client_addr(0), SocketAddr::from((VIP, 80)), "/").expect("a request to the VIP");
            assert_eq!(status, 200);
        }
    }
    // `stats --watch` streams until stopped: what it prints in its first three seconds.
    let mut watch = command(&lab.lb, line(&commands, "lb-ctl stats --watch"), dir.path());
    let mut watching = die_with_parent(watch.stdout(Stdio::piped()).stderr(Stdio::piped())).spawn().unwrap();
    let stdout = watching.stdout.take().unwrap();
    let reader = std::thread::spawn(move || BufReader::new(stdout).lines().map_while(Result::ok).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_secs(3));
    let _ = watching.kill();
    let _ = watching.wait();
    let printed = reader.join().unwrap().join("\n");
    assert!(printed.contains("web"), "stats --watch prints the VIP's rates:\n{printed}");
    let status = daemon.stop();
    assert!(status.success(), "attach stops cleanly on SIGTERM: {status}\n{}", std::fs::read_to_string(&log).unwrap());
    // Cleaning up as docs/operations.md says: the pinned program and maps go with detach.
    run(&lab.lb, &["lb-ctl".into(), "detach".into(), "eth0".into()], dir.path());
}

#[test]
fn dsr_l2_backends_off_link_are_warned_at_start_and_refused_by_backends_add() {
    if !require_root("dsr_l2_backends_off_link_are_warned_at_start_and_refused_by_backends_add") {
        return;
    }
    let lab = Lab::new("fha", 1, 1);
    // 198.51.100.200 and .201 are reached through backend 0 as a gateway: not neighbours.
    for off_link in ["198.51.100.200", "198.51.100.201"] {
        lab.lb.exec(&["ip", "route", "add", &format!("{off_link}/32"), "via", &backend_addr(0).to_string()]);
    }
    let mut d = lb_tests::lab::Daemon::new(&lab.lb, "eth0", "fha", &["--xdp-mode", "native"]);
    d.write_config_text(&format!(
        "[daemon]\napi_socket = \"{}\"\n\n[[vip]]\nname = \"l2\"\naddress = \"{VIP}\"\nport = 80\n\
         forwarding = \"dsr-l2\"\nbackends = [ {{ address = \"{}\" }}, {{ address = \"198.51.100.200\" }} ]\n",
        d.socket().display(),
        backend_addr(0)
    ));
    d.start();
    let log = d.log_text();
    assert!(
        log.contains("dsr-l2 backend 198.51.100.200:80 is reached through the gateway 198.51.100.11"),
        "the start names the backend that is not a neighbour and why:\n{log}"
    );
    assert!(!log.contains(&format!("backend {}:80 is reached", backend_addr(0))), "an on-link backend is fine");
    let events = Command::new("curl")
        .args(["-s", "--unix-socket"])
        .arg(d.socket())
        .arg("http://lb/v1/events")
        .output()
        .expect("curl");
    let events = text(&events);
    assert!(events.contains("198.51.100.200:80 is reached through the gateway"), "an event says so too:\n{events}");

    let before = d.backends();
    let refused = d.ctl(&["backends", "add", "l2", "198.51.100.201"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "backends add refuses an off-link dsr-l2 backend");
    assert!(
        stderr.contains("198.51.100.201:80 is reached through the gateway") && stderr.contains("nothing was changed"),
        "the refusal says why: {stderr}"
    );
    assert_eq!(d.backends(), before, "nothing changed");
    d.ok(&["backends", "add", "l2", "198.51.100.12"]);
    assert_eq!(d.backends().len(), before.len() + 1, "an on-link backend is added");
    assert!(d.stop().success());
    let _ = d.detach();
}
