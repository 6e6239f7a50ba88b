//! The fleet's propagation (part of `cargo xtask bench cluster`): a real etcd on loopback and
//! four `lb-ctl attach --fake-dataplane` nodes following it (the daemon, its writer and the
//! follower are the real ones; the maps are in memory, so this times the control plane, which
//! is what a fleet adds). Prints, over repetitions, the time from `backends add` on node 0 to
//! the backend in every node's state (its ring written), and the time a node restarted after
//! missing a change takes to converge. Asserts nothing.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use lb_ctl::api::client::Client;
use lb_ctl::api::types::BackendRequest;

#[path = "../../../lb-ctl/src/testing/etcd.rs"]
mod etcd;
#[path = "../../../lb-ctl/src/testing/ports.rs"]
mod ports;

const NODES: usize = 4;
const CHANGES: usize = 100;
const REJOINS: usize = 5;
const VIP: &str = "203.0.113.10:80/tcp";

struct Node {
    child: Option<Child>,
    config: PathBuf,
    dir: PathBuf,
    client: Client,
}

impl Node {
    fn start(&mut self, bin: &Path) -> Result<()> {
        let log = std::fs::File::create(self.dir.join("daemon.log"))?;
        let child = Command::new(bin)
            .args(["attach", "test0", "--fake-dataplane", "--log-level", "warn", "--config"])
            .arg(&self.config)
            .arg("--state-dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("lb-ctl attach")?;
        self.child = Some(child);
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the pid of a child this bench started.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
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

/// The backends of the VIP on a node, sorted; None while it does not answer.
async fn backends(client: &Client) -> Option<Vec<String>> {
    let list = client.backends(Some(VIP)).await.ok()?;
    let mut out: Vec<String> = list.iter().map(|b| b.address.to_string()).collect();
    out.sort();
    Some(out)
}

/// Polls `nodes` until each has `want`; the time each took since `since`, the slowest.
async fn until_all(nodes: &[&Client], want: &[String], since: Instant) -> Result<Duration> {
    let mut slowest = Duration::ZERO;
    for client in nodes {
        loop {
            if backends(client).await.as_deref() == Some(want) {
                slowest = slowest.max(since.elapsed());
                break;
            }
            if since.elapsed() > Duration::from_secs(20) {
                bail!("a node did not converge within 20 s");
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
    }
    Ok(slowest)
}

fn percentiles(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    format!("p50 {:.1}  p99 {:.1}  max {:.1}", at(0.5), at(0.99), v[v.len() - 1])
}

pub fn run() -> Result<()> {
    let bin = crate::lab::sibling_bin("lb-ctl");
    println!("\n== fleet: {NODES} nodes (in-memory maps) following one etcd on loopback");
    let etcd = etcd::Etcd::start();
    let root = tempfile::tempdir()?;
    let fleet = |node: &str| {
        format!("[fleet]\nendpoints = [\"{}\"]\nprefix = \"/lb/bench\"\nnode = \"{node}\"\n", etcd.endpoint)
    };
    let pushed = root.path().join("fleet.toml");
    std::fs::write(
        &pushed,
        format!(
            "{}\n[[vip]]\naddress = \"203.0.113.10\"\nport = 80\nbackends = [ {{ address = \"198.51.100.1\", port = 8080 }} ]\n",
            fleet("operator")
        ),
    )?;
    let out = Command::new(&bin).arg("fleet").arg("push").arg(&pushed).output()?;
    if !out.status.success() {
        bail!("fleet push: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mut nodes = Vec::new();
    for i in 0..NODES {
        let dir = root.path().join(format!("n{i}"));
        std::fs::create_dir_all(&dir)?;
        let socket = dir.join("run").join("test0.sock");
        let config = dir.join("lb.toml");
        std::fs::write(
            &config,
            format!("[daemon]\napi_socket = \"{}\"\n\n{}", socket.display(), fleet(&format!("n{i}"))),
        )?;
        let mut node = Node { child: None, config, dir, client: Client::new(socket) };
        node.start(&bin)?;
        nodes.push(node);
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let mut want = vec!["198.51.100.1:8080".to_string()];
        let clients: Vec<&Client> = nodes.iter().map(|n| &n.client).collect();
        until_all(&clients, &want, Instant::now()).await?;
        let mut times = Vec::new();
        for i in 0..CHANGES {
            let address = format!("198.51.100.{}:8080", 10 + i);
            let request = BackendRequest { vip: VIP.into(), address: address.clone(), weight: None };
            let start = Instant::now();
            clients[0].add_backend(&request).await.map_err(|e| anyhow::anyhow!("backends add: {e}"))?;
            want.push(address);
            want.sort();
            times.push(until_all(&clients, &want, start).await?.as_secs_f64() * 1000.0);
        }
        println!(
            "   backends add on node 0 to the backend on all {NODES} nodes, ms ({CHANGES} changes): {}   (target p99 < 100)",
            percentiles(times)
        );
        Ok::<(), anyhow::Error>(())
    })?;
    // A node down while a change is made, then started again: until it serves the change.
    let mut rejoins = Vec::new();
    for i in 0..REJOINS {
        nodes[NODES - 1].stop();
        let address = format!("198.51.100.{}:8080", 200 + i);
        let want = runtime.block_on(async {
            let request = BackendRequest { vip: VIP.into(), address, weight: None };
            nodes[0].client.add_backend(&request).await.map_err(|e| anyhow::anyhow!("backends add: {e}"))?;
            backends(&nodes[0].client).await.context("node 0 answers")
        })?;
        let start = Instant::now();
        nodes[NODES - 1].start(&bin)?;
        let last = &nodes[NODES - 1].client;
        rejoins.push(runtime.block_on(until_all(&[last], &want, start))?.as_secs_f64() * 1000.0);
    }
    println!(
        "   a node restarted after missing a change, from its start to the change served, ms ({REJOINS} runs): {}",
        percentiles(rejoins)
    );
    for node in &mut nodes {
        node.stop();
    }
    Ok(())
}
