//! A real etcd (Debian's etcd-server) for the fleet's tests: one member on loopback, its data
//! in a temporary directory, stopped by pid when dropped.
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::ports::free_port;

pub struct Etcd {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    peer_url: String,
    dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts etcd and waits until it answers. Panics (a test failure, not a skip) if the
    /// binary is missing: `cargo xtask setup` installs etcd-server.
    pub fn start() -> Etcd {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("http://127.0.0.1:{}", free_port());
        let peer_url = format!("http://127.0.0.1:{}", free_port());
        let mut etcd = Etcd { child: None, endpoint, peer_url, dir };
        etcd.restart();
        etcd
    }

    /// Starts it again on the same data and ports (after [`Etcd::kill`]).
    pub fn restart(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.path().join("etcd.log")).unwrap();
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &self.endpoint, "--advertise-client-urls", &self.endpoint])
            .args(["--listen-peer-urls", &self.peer_url, "--initial-advertise-peer-urls", &self.peer_url])
            .args(["--initial-cluster", &format!("t={}", self.peer_url)])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("etcd must be installed (Debian's etcd-server; `cargo xtask setup` installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(self.endpoint.trim_start_matches("http://")).is_err() {
            assert!(Instant::now() < deadline, "etcd did not listen within 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills it (SIGKILL, by pid): a lost etcd.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `etcdctl ARGS` against it; its stdout.
    #[allow(dead_code)] // tests/fleet.rs includes this file and uses it; the unit tests do not
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(&self.endpoint)
            .args(args)
            .output()
            .expect("etcdctl (Debian's etcd-client)");
        assert!(out.status.success(), "etcdctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
    }
}
