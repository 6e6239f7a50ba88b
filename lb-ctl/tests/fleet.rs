//! A fleet end to end without root: a real etcd (Debian's etcd-server), two `lb-ctl attach
//! --fake-dataplane` nodes following it (maps in memory, everything else the real daemon),
//! and the real CLI: push, a backend added on one node reaching both with equal rings, etcd
//! lost (forwarding state kept, changes refused with a clear message), a node restarted
//! without etcd (its saved state served), catching up on reconnect, a malformed value
//! refused while the last good state stays, and a node's backend changes made over its one
//! etcd connection.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../src/testing/etcd.rs"]
mod etcd;
#[path = "../src/testing/ports.rs"]
mod ports;

use etcd::Etcd;

const BIN: &str = env!("CARGO_BIN_EXE_lb-ctl");

fn fleet_table(etcd: &Etcd, prefix: &str, node: &str) -> String {
    format!("[fleet]\nendpoints = [\"{}\"]\nprefix = \"{prefix}\"\nnode = \"{node}\"\n", etcd.endpoint)
}

/// The file an operator pushes: the fleet's VIPs.
fn pushed(etcd: &Etcd, prefix: &str) -> String {
    format!(
        r#"{}
[[vip]]
name = "web"
address = "203.0.113.10"
port = 80
backends = [ {{ address = "198.51.100.1", port = 8080 }}, {{ address = "198.51.100.2", port = 8080 }} ]
"#,
        fleet_table(etcd, prefix, "operator")
    )
}

/// A node: its own file holds no VIP.
struct Node {
    child: Option<Child>,
    dir: PathBuf,
    socket: PathBuf,
}

impl Node {
    fn start(root: &Path, etcd: &Etcd, prefix: &str, name: &str) -> Node {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("run").join("test0.sock");
        let text = format!(
            "[daemon]\napi_socket = \"{}\"\nring_size = 251\n\n{}",
            socket.display(),
            fleet_table(etcd, prefix, name)
        );
        std::fs::write(dir.join("lb.toml"), text).unwrap();
        let mut node = Node { child: None, dir, socket };
        node.restart();
        node
    }

    fn restart(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("daemon.log")).unwrap();
        let child = Command::new(BIN)
            .args(["attach", "test0", "--fake-dataplane", "--log-level", "info", "--config"])
            .arg(self.dir.join("lb.toml"))
            .arg("--state-dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        wait_for("the daemon answers", || self.run(&["status"]).status.success());
    }

    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            // SAFETY: kill(2) on the pid of a child this test started.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let mut child = child;
            child.wait().unwrap();
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(BIN).arg("--socket").arg(&self.socket).args(args).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "{args:?} failed: {}\n{}", String::from_utf8_lossy(&out.stderr), self.log());
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        serde_json::from_str(&self.ok(args)).unwrap()
    }

    /// VIP label → ring digest.
    fn rings(&self) -> Vec<(String, Option<String>)> {
        let vips = self.json(&["vips", "list", "--json"]);
        vips.as_array()
            .unwrap()
            .iter()
            .map(|v| (v["name"].as_str().unwrap_or("").to_string(), v["ring_digest"].as_str().map(String::from)))
            .collect()
    }

    fn backends(&self) -> Vec<String> {
        let list = self.json(&["backends", "list", "--json"]);
        let mut out: Vec<String> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|b| format!("{} {}", b["address"].as_str().unwrap(), b["state"].as_str().unwrap()))
            .collect();
        out.sort();
        out
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The operator's file pushed to `prefix` (written as `fleet.toml` in `root`), and node `a`
/// started and serving the fleet's VIP.
fn one_node_following(root: &Path, etcd: &Etcd, prefix: &str) -> (PathBuf, Node) {
    let file = root.join("fleet.toml");
    std::fs::write(&file, pushed(etcd, prefix)).unwrap();
    stdout_of(&lb_ctl(&["fleet", "push", file.to_str().unwrap()]));
    let node = Node::start(root, etcd, prefix, "a");
    wait_for("the fleet's VIP", || node.rings().iter().any(|(n, d)| n == "web" && d.is_some()));
    (file, node)
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn lb_ctl(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn stdout_of(out: &Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_backend_added_on_one_node_reaches_every_node_and_etcd_loss_changes_no_forwarding() {
    let mut etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let prefix = "/lb/e2e1";
    let file = root.path().join("fleet.toml");
    std::fs::write(&file, pushed(&etcd, prefix)).unwrap();
    let f = file.to_str().unwrap();
    assert_eq!(stdout_of(&lb_ctl(&["fleet", "diff", f])), "+ vip 203.0.113.10:80/tcp: 2 backends\n");
    let out = stdout_of(&lb_ctl(&["fleet", "push", f]));
    assert!(out.contains("pushed to the fleet /lb/e2e1 at revision"), "{out}");
    assert!(stdout_of(&lb_ctl(&["fleet", "diff", f])).starts_with("no change"));

    let mut a = Node::start(root.path(), &etcd, prefix, "a");
    let b = Node::start(root.path(), &etcd, prefix, "b");
    for node in [&a, &b] {
        wait_for("the fleet's VIP on each node", || node.rings().iter().any(|(n, d)| n == "web" && d.is_some()));
    }
    assert_eq!(a.rings(), b.rings(), "equal backends, equal rings");

    // Added once, on node a: written to the fleet, applied on both.
    let said = a.ok(&["backends", "add", "web", "198.51.100.7:8080"]);
    assert!(said.contains("added in the fleet /lb/e2e1"), "{said}");
    assert!(said.contains("(applied here)"), "{said}");
    wait_for("the new backend on node b", || b.backends().iter().any(|x| x.starts_with("198.51.100.7:8080")));
    wait_for("equal rings", || a.rings() == b.rings());
    // Drained on b: drained everywhere.
    b.ok(&["backends", "drain", "web", "198.51.100.1:8080"]);
    wait_for("the drain on node a", || a.backends().contains(&"198.51.100.1:8080 draining".to_string()));
    wait_for("equal rings", || a.rings() == b.rings());
    let rings = a.rings();

    // Both nodes recorded themselves; `fleet status` compares them.
    wait_for("both nodes current in `fleet status`", || {
        let s = String::from_utf8_lossy(&lb_ctl(&["fleet", "status", "-c", f]).stdout).into_owned();
        s.lines().filter(|l| l.contains(" yes ") && l.contains("equal")).count() == 2
    });

    // etcd lost: forwarding state unchanged, changes refused with a reason, status says so.
    etcd.kill();
    wait_for("node a says etcd is lost", || a.json(&["status", "--json"])["fleet"]["connected"] == false);
    assert_eq!(a.rings(), rings, "a node without etcd keeps its rings");
    let out = b.run(&["backends", "add", "web", "198.51.100.8:8080"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("etcd cannot be reached") && err.contains("nothing was changed"), "{err}");
    assert_eq!(b.rings(), rings);

    // Restarted without etcd, node a serves its saved state.
    a.stop();
    a.restart();
    assert_eq!(a.rings(), rings, "a restart without etcd serves the last applied state");

    // etcd back: a change made meanwhile... reaches both once they reconnect.
    etcd.restart();
    wait_for("node a reconnects", || a.json(&["status", "--json"])["fleet"]["connected"] == true);
    b.ok(&["backends", "remove", "web", "198.51.100.2:8080"]);
    for node in [&a, &b] {
        wait_for("the removal on each node", || !node.backends().iter().any(|x| x.starts_with("198.51.100.2:")));
    }
    wait_for("equal rings", || a.rings() == b.rings());
}

#[test]
fn a_malformed_value_in_etcd_is_refused_and_the_last_good_state_stays() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let prefix = "/lb/e2e2";
    let (file, node) = one_node_following(root.path(), &etcd, prefix);
    let rings = node.rings();
    let key = format!("{prefix}/state/vips/203.0.113.10:80/tcp");
    etcd.ctl(&["put", &key, "address = "]);
    wait_for("the refusal in status", || {
        node.json(&["status", "--json"])["fleet"]["refused"].as_str().is_some_and(|r| r.contains("not a TOML table"))
    });
    assert_eq!(node.rings(), rings, "the last good state stays");
    assert!(node.log().contains("fleet: state refused, nothing changed"), "{}", node.log());
    // Too large: refused too.
    etcd.ctl(&["put", &key, &format!("# {}", "x".repeat(70 * 1024))]);
    wait_for("the size refusal", || {
        node.json(&["status", "--json"])["fleet"]["refused"]
            .as_str()
            .is_some_and(|r| r.contains("more than the 65536 allowed"))
    });
    assert_eq!(node.rings(), rings);
    // A good push puts it right.
    let mut fixed = pushed(&etcd, prefix);
    fixed = fixed.replace("port = 8080 }, {", "port = 8080, weight = 50 }, {");
    std::fs::write(&file, fixed).unwrap();
    stdout_of(&lb_ctl(&["fleet", "push", file.to_str().unwrap()]));
    wait_for("the good state applied", || node.json(&["status", "--json"])["fleet"]["refused"].is_null());
    assert_ne!(node.rings(), rings, "the weight changed the ring");
}

/// Local ports of every TCP connection to `etcd` (TIME_WAIT ones too: they stay a minute).
fn ports_to(etcd: &Etcd) -> std::collections::BTreeSet<String> {
    let port = etcd.endpoint.rsplit(':').next().unwrap();
    let out = Command::new("ss").args(["-Htan", "dst", &format!("127.0.0.1:{port}")]).output().expect("ss (iproute2)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3)?.rsplit(':').next().map(String::from))
        .collect()
}

#[test]
fn backend_changes_on_a_node_use_its_one_etcd_connection() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let prefix = "/lb/e2e3";
    let (_, node) = one_node_following(root.path(), &etcd, prefix);
    wait_for("the node's record", || node.json(&["status", "--json"])["fleet"]["connected"] == true);
    let before = ports_to(&etcd);
    for i in 0..5 {
        node.ok(&["backends", "add", "web", &format!("198.51.100.{}:8080", 20 + i)]);
    }
    let new: Vec<String> = ports_to(&etcd).difference(&before).cloned().collect();
    assert!(new.is_empty(), "five changes opened connections to etcd from ports {new:?} (before: {before:?})");
}
