//! The real daemon, `lb-ctl attach IFACE`, in a namespace of the lab (entered with
//! `nsenter --net`, so its bpffs pins live in the host's mount), driven by the real CLI over
//! its control socket. Each daemon has its own run directory (config, log, socket, state) and
//! pin directory, both named `lbt-<pid>-<tag>`; dropping it stops the daemon and runs
//! `lb-ctl detach`, also when the run panics.
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use lb_ctl::api::types::BackendView;

use crate::netns::{Netns, die_with_parent, run_name};

/// How long a starting daemon may take to answer (a full 64 x 64 table takes a while).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How `lb-ctl attach` enters the lab namespace.
#[derive(Clone, Copy, Debug)]
pub enum Entry {
    /// `nsenter --net=/run/netns/NAME`: the network namespace only (the documented way).
    Nsenter,
    /// `ip netns exec NAME`: a mount namespace of its own too, with a private /sys.
    IpNetnsExec,
}

pub struct Daemon {
    netns: String,
    iface: String,
    /// Arguments of `lb-ctl attach IFACE` besides config, pins and state (XDP mode, logging).
    args: Vec<String>,
    dir: PathBuf,
    pins: PathBuf,
    child: Option<Child>,
    /// A file the daemon sees as /etc/hosts (bind-mounted in a mount namespace of its own).
    hosts: Option<PathBuf>,
    /// The lb-ctl that `attach` runs (the build under test unless changed: an upgrade test
    /// runs an older layout's build first).
    bin: PathBuf,
}

impl Daemon {
    /// A daemon for `iface` in namespace `netns`, not started yet; `args` are added to
    /// `lb-ctl attach IFACE` (for example `--xdp-mode native`).
    pub fn new(netns: &Netns, iface: &str, tag: &str, args: &[&str]) -> Daemon {
        let dir = std::env::temp_dir().join(run_name(tag));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        Daemon {
            netns: netns.name.clone(),
            iface: iface.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            dir,
            pins: PathBuf::from("/sys/fs/bpf").join(run_name(tag)),
            child: None,
            hosts: None,
            bin: crate::lb_ctl_bin(),
        }
    }

    /// Runs `attach` with the lb-ctl at `bin` from now on (the next start).
    pub fn set_bin(&mut self, bin: &Path) {
        self.bin = bin.to_path_buf();
    }

    /// Makes the daemon resolve host names with `path` as its /etc/hosts: it runs in a mount
    /// namespace of its own where `path` is bind-mounted there, so rewriting `path` in place
    /// changes what it resolves and nothing else on the host.
    pub fn with_hosts_file(mut self, path: &Path) -> Daemon {
        self.hosts = Some(path.to_path_buf());
        self
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("ctl/lb.sock")
    }

    pub fn config(&self) -> PathBuf {
        self.dir.join("lb.toml")
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join("daemon.log")
    }

    /// The run directory (config, log, socket, state).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn pins(&self) -> &Path {
        &self.pins
    }

    /// Writes lb.toml (whose `api_socket` should be [`Daemon::socket`]).
    pub fn write_config_text(&self, text: &str) {
        std::fs::write(self.config(), text).expect("writing lb.toml");
    }

    /// The daemon's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `lb-ctl attach IFACE` with this daemon's arguments, entering its namespace as
    /// [`Entry`] says; output to the log.
    fn attach_command(&self, entry: Entry) -> Command {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log()).unwrap();
        let mut command = match entry {
            Entry::Nsenter => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{}", self.netns));
                c
            }
            Entry::IpNetnsExec => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &self.netns]);
                c
            }
        };
        if let Some(hosts) = &self.hosts {
            command
                .args(["unshare", "--mount", "--propagation", "private", "sh", "-c"])
                .arg("mount --bind \"$0\" /etc/hosts && exec \"$@\"")
                .arg(hosts);
        }
        command
            .arg(&self.bin)
            .args(["attach", &self.iface])
            .args(&self.args)
            .arg("--config")
            .arg(self.config())
            .arg("--pin-dir")
            .arg(&self.pins)
            .arg("--state-dir")
            .arg(self.dir.join("state"))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        command
    }

    /// Runs `lb-ctl attach` (entered as `entry` says) expecting it to fail: waits for its exit
    /// (up to a minute; one still running then is stopped and its status returned) and
    /// returns the exit status and what it logged.
    pub fn attach_expecting_failure(&mut self, entry: Entry) -> (ExitStatus, String) {
        assert!(self.child.is_none(), "the daemon is already running");
        let _ = std::fs::remove_file(self.log());
        let mut child = die_with_parent(&mut self.attach_command(entry)).spawn().expect("starting lb-ctl attach");
        let deadline = Instant::now() + START_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                // SAFETY: kill(2) on the pid of our own child, not reaped yet.
                unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
                break child.wait().unwrap();
            }
            super::stop_if_interrupted();
            std::thread::sleep(Duration::from_millis(50));
        };
        (status, self.log_text())
    }

    /// Starts the daemon and waits until its socket answers; returns how long that took.
    pub fn start(&mut self) -> Duration {
        assert!(self.child.is_none(), "the daemon is already running");
        let started = Instant::now();
        let mut command = self.attach_command(Entry::Nsenter);
        self.child = Some(die_with_parent(&mut command).spawn().expect("starting lb-ctl attach"));
        loop {
            if self.ctl(&["status"]).status.success() {
                return started.elapsed();
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                panic!("lb-ctl attach exited with {status}:\n{}", self.log_text());
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "the daemon did not answer within {START_TIMEOUT:?}:\n{}",
                self.log_text()
            );
            super::stop_if_interrupted();
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `lb-ctl detach IFACE` in the daemon's namespace (its pins, saved ids and announced
    /// routes there), as an operator runs it after a stop.
    pub fn detach(&self) -> std::io::Result<Output> {
        self.detach_command(true).output()
    }

    /// `lb-ctl detach IFACE` as an operator who does not know the daemon's control socket
    /// runs it (no `--socket`).
    pub fn detach_without_socket(&self) -> Output {
        self.detach_command(false).output().expect("running lb-ctl detach")
    }

    fn detach_command(&self, with_socket: bool) -> Command {
        let mut command = Command::new("nsenter");
        command.arg(format!("--net=/run/netns/{}", self.netns)).arg(crate::lb_ctl_bin());
        if with_socket {
            command.arg("--socket").arg(self.socket());
        }
        command.args(["detach", &self.iface, "--pin-dir"]).arg(&self.pins).arg("--state-dir").arg(self.state_dir());
        command
    }

    /// The directory of the saved ids, the attach mode and the daemon's lock.
    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// SIGKILL (a crash, as an outsider would cause it), and reaps it.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("the daemon is running");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// SIGTERM, then waits for the exit; returns the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("the daemon is running");
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the daemon did not stop within 10 s of SIGTERM:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The daemon's log so far, without terminal colour codes.
    pub fn log_text(&self) -> String {
        let raw = std::fs::read_to_string(self.log()).unwrap_or_default();
        let mut out = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                // CSI: ESC [ parameters final-byte
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    /// `lb-ctl --socket SOCKET ARGS...` inside the daemon's network namespace: for commands that
    /// send packets from the balancer (`backends verify`).
    pub fn ctl_on_balancer(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.netns))
            .arg(crate::lb_ctl_bin())
            .arg("--socket")
            .arg(self.socket())
            .args(args)
            .output()
            .expect("running lb-ctl")
    }

    /// `lb-ctl --socket SOCKET ARGS...`, as root.
    pub fn ctl(&self, args: &[&str]) -> Output {
        Command::new(crate::lb_ctl_bin())
            .arg("--socket")
            .arg(self.socket())
            .args(args)
            .output()
            .expect("running lb-ctl")
    }

    /// Like [`Daemon::ctl`], asserting success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "lb-ctl {args:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `lb-ctl explain VIP CLIENT --json`: how the balancer places `client`'s flow (`decision`,
    /// `backend`, ...).
    pub fn explain(&self, vip: &str, client: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["explain", vip, client, "--json"])).expect("explain --json")
    }

    /// `lb-ctl backends list --json`.
    pub fn backends(&self) -> Vec<BackendView> {
        serde_json::from_str(&self.ok(&["backends", "list", "--json"])).expect("backends list --json")
    }

    pub fn find_backend(&self, address: SocketAddr) -> Option<BackendView> {
        self.backends().into_iter().find(|b| b.address == address)
    }

    /// Polls the backend list until `pred` holds for the backend at `address`; returns the
    /// time it took.
    pub fn wait_for_backend(
        &self,
        address: SocketAddr,
        within: Duration,
        what: &str,
        pred: impl Fn(&BackendView) -> bool,
    ) -> Duration {
        let started = Instant::now();
        loop {
            let found = self.find_backend(address);
            if found.as_ref().is_some_and(&pred) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < within,
                "backend {address} not {what} within {within:?}: {found:?}\n{}",
                self.log_text()
            );
            super::stop_if_interrupted();
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the pid of our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let detached = self.detach();
        if !detached.is_ok_and(|o| o.status.success()) && self.pins.exists() {
            let paths = lb_ctl::paths::AttachPaths::balancer(
                &self.iface,
                Some(self.pins.clone()),
                Some(self.dir.join("state")),
            );
            let _ = lb_ctl::dataplane::attach::detach(&paths);
        }
        if std::thread::panicking() && !super::interrupted() {
            eprintln!("--- daemon log ({}) ---\n{}", self.log().display(), self.log_text());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
