//! A three-member etcd cluster (Debian's `etcd`) on the scale-out lab's segment: each member
//! in a namespace of its own, plugged into the router's bridge at 198.51.100.31-33, its data
//! in the run's directory. Members are killed by pid (SIGKILL, as a crash) and started again
//! on their data; `etcdctl` runs in the router's namespace, which reaches every member.
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::netns::{Netns, die_with_parent, run_name};

/// Members in the cluster: a quorum survives one lost.
pub const MEMBERS: usize = 3;
const CLIENT_PORT: u16 = 2379;
const PEER_PORT: u16 = 2380;
/// A member starting, an election: generous for a loaded machine.
const SETTLE: Duration = Duration::from_secs(30);

/// Member `k`'s address on the segment.
pub fn member_addr(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 51, 100, (31 + k) as u8)
}

/// The first and last member addresses (a partition drops this range).
pub fn member_range() -> String {
    format!("{}-{}", member_addr(0), member_addr(MEMBERS - 1))
}

struct Member {
    ns: Netns,
    child: Option<Child>,
}

pub struct EtcdCluster {
    members: Vec<Member>,
    /// The namespace `etcdctl` runs in (the router's).
    ctl_ns: String,
    dir: PathBuf,
}

impl EtcdCluster {
    /// Starts the members, each in namespace `TAGeK` linked to `router`'s `br0`, and waits
    /// until the cluster has a leader. Panics (a failure, not a skip) without etcd:
    /// `cargo xtask setup` installs etcd-server.
    pub fn start(router: &Netns, tag: &str) -> EtcdCluster {
        let dir = std::env::temp_dir().join(run_name(&format!("{tag}-etcd")));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let members = (0..MEMBERS)
            .map(|k| {
                let ns = Netns::new(&format!("{tag}e{k}"));
                let port = format!("p-e{k}");
                router.exec(&["ip", "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns.name]);
                router.exec(&["ip", "link", "set", &port, "master", "br0", "up"]);
                ns.exec(&["ip", "link", "set", "eth0", "up"]);
                ns.exec(&["ethtool", "-K", "eth0", "tx", "off", "tso", "off", "gso", "off"]);
                ns.exec(&["ip", "addr", "add", &format!("{}/24", member_addr(k)), "dev", "eth0"]);
                Member { ns, child: None }
            })
            .collect();
        let mut etcd = EtcdCluster { members, ctl_ns: router.name.clone(), dir };
        for k in 0..MEMBERS {
            etcd.restart(k);
        }
        etcd.wait_for_leader(None);
        etcd
    }

    /// The members' client URLs, for `[fleet] endpoints`.
    pub fn endpoints(&self) -> Vec<String> {
        (0..MEMBERS).map(|k| format!("http://{}:{CLIENT_PORT}", member_addr(k))).collect()
    }

    /// Starts member `k` (again, on its data after [`EtcdCluster::kill`]).
    pub fn restart(&mut self, k: usize) {
        assert!(self.members[k].child.is_none(), "etcd member {k} is running");
        let url = |k: usize, port: u16| format!("http://{}:{port}", member_addr(k));
        let initial: Vec<String> = (0..MEMBERS).map(|m| format!("m{m}={}", url(m, PEER_PORT))).collect();
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join(format!("m{k}.log"))).unwrap();
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.members[k].ns.name, "etcd", "--name", &format!("m{k}"), "--data-dir"])
            .arg(self.dir.join(format!("m{k}")))
            .args(["--listen-client-urls", &url(k, CLIENT_PORT), "--advertise-client-urls", &url(k, CLIENT_PORT)])
            .args(["--listen-peer-urls", &url(k, PEER_PORT), "--initial-advertise-peer-urls", &url(k, PEER_PORT)])
            .args(["--initial-cluster", &initial.join(","), "--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &run_name("fleet")])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // `ip netns exec` execs etcd: the child's pid is etcd's.
        let child = die_with_parent(&mut command)
            .spawn()
            .unwrap_or_else(|e| panic!("starting etcd (Debian's etcd-server; `cargo xtask setup`): {e}"));
        self.members[k].child = Some(child);
    }

    /// SIGKILL to member `k`, by pid: a crashed member.
    pub fn kill(&mut self, k: usize) {
        if let Some(mut child) = self.members[k].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn live_endpoints(&self) -> String {
        let live = (0..MEMBERS).filter(|k| self.members[*k].child.is_some());
        live.map(|k| format!("http://{}:{CLIENT_PORT}", member_addr(k))).collect::<Vec<_>>().join(",")
    }

    /// `etcdctl ARGS` against the running members, from the router's namespace.
    pub fn ctl_output(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ctl_ns, "etcdctl", "--endpoints", &self.live_endpoints()])
            .args(args)
            .env("ETCDCTL_API", "3")
            .output()
            .expect("etcdctl (Debian's etcd-client)")
    }

    /// [`EtcdCluster::ctl_output`], which must succeed; its stdout.
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = self.ctl_output(args);
        assert!(out.status.success(), "etcdctl {args:?}: {}\n{}", String::from_utf8_lossy(&out.stderr), self.logs());
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The leader among the running members, if they agree on one.
    pub fn leader(&self) -> Option<usize> {
        let out = self.ctl_output(&["endpoint", "status", "-w", "json", "--command-timeout", "2s"]);
        let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).ok()?;
        let mut leaders = list.iter().map(|s| s["Status"]["leader"].as_u64());
        let leader = leaders.next()??;
        if leader == 0 || list.len() < MEMBERS.div_ceil(2) || leaders.any(|l| l != Some(leader)) {
            return None;
        }
        let endpoint = list.iter().find(|s| s["Status"]["header"]["member_id"].as_u64() == Some(leader))?;
        let url = endpoint["Endpoint"].as_str()?;
        (0..MEMBERS).find(|k| url.contains(&member_addr(*k).to_string()))
    }

    /// Makes member `k` the leader (`etcdctl move-leader`) and waits until it is.
    pub fn move_leader(&self, k: usize) {
        let out = self.ctl_output(&["endpoint", "status", "-w", "json"]);
        let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("endpoint status -w json");
        let id = list
            .iter()
            .find(|s| s["Endpoint"].as_str().is_some_and(|e| e.contains(&member_addr(k).to_string())))
            .and_then(|s| s["Status"]["header"]["member_id"].as_u64())
            .unwrap_or_else(|| panic!("etcd member {k} in endpoint status: {list:?}"));
        if self.leader() != Some(k) {
            self.ctl(&["move-leader", &format!("{id:x}")]);
        }
        let started = Instant::now();
        while self.leader() != Some(k) {
            assert!(started.elapsed() < SETTLE, "etcd: m{k} not leader within {SETTLE:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the running members agree on a leader other than `not`; returns it.
    pub fn wait_for_leader(&self, not: Option<usize>) -> usize {
        let started = Instant::now();
        loop {
            if let Some(leader) = self.leader().filter(|l| Some(*l) != not) {
                return leader;
            }
            assert!(started.elapsed() < SETTLE, "etcd: no leader within {SETTLE:?}\n{}", self.logs());
            crate::lab::stop_if_interrupted();
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every member's log, for failure messages.
    pub fn logs(&self) -> String {
        (0..MEMBERS)
            .map(|k| {
                let text = std::fs::read_to_string(self.dir.join(format!("m{k}.log"))).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                format!("--- etcd m{k} (last lines)\n{}\n", tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
            })
            .collect()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for k in 0..MEMBERS {
            self.kill(k);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        // The namespaces go with the members (field drop).
    }
}

/// Cuts namespace `ns` off from every etcd member (nftables drops both ways: a partition,
/// nothing stopped); the rest of its traffic flows as before.
pub fn partition(ns: &Netns) {
    let range = member_range();
    ns.exec(&["nft", "add table inet lbt_fleet_cut"]);
    ns.exec(&["nft", "add chain inet lbt_fleet_cut out { type filter hook output priority 0 ; }"]);
    ns.exec(&["nft", "add chain inet lbt_fleet_cut in { type filter hook input priority 0 ; }"]);
    ns.exec(&["nft", &format!("add rule inet lbt_fleet_cut out ip daddr {range} drop")]);
    ns.exec(&["nft", &format!("add rule inet lbt_fleet_cut in ip saddr {range} drop")]);
}

/// Ends [`partition`].
pub fn heal(ns: &Netns) {
    ns.exec(&["nft", "delete table inet lbt_fleet_cut"]);
}
