//! Route health injection: the VIP addresses this node should be sent traffic for, kept as
//! host routes in one kernel routing table (`daemon.announce_table`, protocol
//! [`ROUTE_PROTOCOL`]) that the routing daemon learns and announces to the routers (BIRD's
//! `kernel` protocol with `learn`, exported over BGP: see `docs/bird.conf`).
//!
//! Why a kernel table rather than a generated BIRD include reloaded with `birdc configure`:
//! the table is the one place both sides read, it needs no control socket or BIRD version in
//! common, a BIRD restart finds the routes where it left them, and `ip route show table 4242`
//! shows an operator exactly what is announced.
//!
//! A VIP is announced while the node is not drained and at least `announce.min_healthy` of its
//! backends are healthy and not drained. Every change goes through the writer, which calls
//! [`Routes::apply`] after each change of the state; a clean stop withdraws everything. After
//! a crash the routes stay: the pinned XDP program keeps forwarding, so the node still serves.
mod kernel;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

pub use kernel::KernelRoutes;

use crate::state::State;

/// The routing protocol number lb-ctl's routes carry (`ip route show table T proto 249`), so
/// they can be told from anything else in the table.
pub const ROUTE_PROTOCOL: u8 = 249;

/// Where the announced routes are kept.
pub trait Routes: Send {
    /// Makes the announced set `want`; returns what it added and withdrew.
    fn apply(&mut self, want: &BTreeSet<IpAddr>) -> Result<Change, String>;
    /// What is announced now.
    fn announced(&self) -> BTreeSet<IpAddr>;
    /// Reads back what the table really holds, so the next `apply` puts back a route removed
    /// by hand and takes out one added under our protocol.
    fn reread(&mut self) -> Result<(), String> {
        Ok(())
    }
}

/// How often the daemon reads its table back and retries a failed change.
pub const CHECK_PERIOD: std::time::Duration = std::time::Duration::from_secs(5);

/// What an [`Routes::apply`] changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Change {
    pub announced: Vec<IpAddr>,
    pub withdrawn: Vec<IpAddr>,
}

impl Change {
    pub fn is_empty(&self) -> bool {
        self.announced.is_empty() && self.withdrawn.is_empty()
    }
}

/// Whether BIRD can announce the table, as told by its control socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bird {
    /// Something accepts connections on the socket: BIRD runs.
    Running,
    /// The `bird` program is installed but nothing answers on the socket (why, in words).
    NotRunning(String),
    /// No `bird` program where a package puts it (PATH, /usr/sbin, /usr/local/sbin, /sbin).
    NotInstalled,
}

impl Bird {
    /// BIRD on `socket` (`[daemon] bird_socket`): a connection to the control socket, nothing
    /// sent. A socket in the filesystem, so it answers from any network namespace.
    pub fn check(socket: &Path) -> Bird {
        let mut dirs: Vec<PathBuf> =
            std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
        dirs.extend(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from));
        Bird::check_with(socket, &dirs)
    }

    /// [`Bird::check`], looking for the program in `dirs`.
    pub fn check_with(socket: &Path, dirs: &[PathBuf]) -> Bird {
        match std::os::unix::net::UnixStream::connect(socket) {
            Ok(_) => Bird::Running,
            Err(_) if !dirs.iter().any(|d| is_program(&d.join("bird"))) => Bird::NotInstalled,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Bird::NotRunning(format!("no control socket {}", socket.display()))
            }
            Err(e) => Bird::NotRunning(format!("control socket {}: {e}", socket.display())),
        }
    }

    /// What an operator reads (status line, warning): what is wrong and what to do.
    pub fn problem(&self) -> Option<String> {
        match self {
            Bird::Running => None,
            Bird::NotInstalled => Some(
                "BIRD is not installed (no `bird` in PATH, /usr/sbin, /usr/local/sbin): install it (Debian: apt-get install bird2) and configure it as docs/bird.conf shows"
                    .into(),
            ),
            Bird::NotRunning(why) => Some(format!(
                "BIRD is installed but not running ({why}): start it (systemctl start bird), or set [daemon] bird_socket to the socket it was started with (bird -s), default {}",
                crate::config::DEFAULT_BIRD_SOCKET
            )),
        }
    }
}

fn is_program(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The addresses `state` says to announce.
pub fn wanted(state: &State) -> BTreeSet<IpAddr> {
    if state.node_drained {
        return BTreeSet::new();
    }
    state
        .vips
        .iter()
        .filter(|v| {
            let Some(announce) = v.announce else { return false };
            let healthy = v.backends.iter().filter(|b| b.health.is_usable() && b.effective_weight() > 0).count();
            healthy >= announce.min_healthy as usize
        })
        .map(|v| v.address)
        .collect()
}

/// Routes kept in memory only (`attach --fake-dataplane`, tests).
#[derive(Debug, Default)]
pub struct MemoryRoutes {
    set: BTreeSet<IpAddr>,
}

impl Routes for MemoryRoutes {
    fn apply(&mut self, want: &BTreeSet<IpAddr>) -> Result<Change, String> {
        let change = Change {
            announced: want.difference(&self.set).copied().collect(),
            withdrawn: self.set.difference(want).copied().collect(),
        };
        self.set = want.clone();
        Ok(change)
    }

    fn announced(&self) -> BTreeSet<IpAddr> {
        self.set.clone()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::Config;

    fn state(text: &str) -> State {
        let config = Config::parse(text, Path::new("lb.toml")).unwrap_or_else(|e| panic!("{e}"));
        State::from_config(&config, &State::default()).unwrap()
    }

    const TWO_VIPS: &str = "[[vip]]\nname = \"web\"\naddress = \"203.0.113.10\"\nport = 80\nforwarding = \"dsr-ipip\"\nencap_source = \"198.51.100.254\"\nannounce = { min_healthy = 2 }\nbackends = [ { address = \"198.51.100.1\" }, { address = \"198.51.100.2\" } ]\n\n[[vip]]\nname = \"quiet\"\naddress = \"203.0.113.11\"\nport = 80\nbackends = [ { address = \"198.51.100.1\" } ]\n";

    #[test]
    fn a_vip_is_announced_while_enough_backends_serve_and_the_node_is_not_drained() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut s = state(TWO_VIPS);
        assert_eq!(wanted(&s), BTreeSet::from([ip("203.0.113.10")]), "only VIPs with [vip.announce]");
        s.drain_backend("web", "198.51.100.2").unwrap();
        assert!(wanted(&s).is_empty(), "one backend serving, two required");
        s.undrain_backend("web", "198.51.100.2").unwrap();
        s.node_drained = true;
        assert!(wanted(&s).is_empty(), "a drained node announces nothing");
    }

    #[test]
    fn bird_is_told_running_not_running_or_not_installed_by_its_control_socket() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("bird.ctl");
        let bin = dir.path().join("sbin");
        std::fs::create_dir(&bin).unwrap();
        let nowhere = [dir.path().join("empty")];
        // Neither the program nor the socket.
        assert_eq!(Bird::check_with(&socket, &nowhere), Bird::NotInstalled);
        assert!(Bird::NotInstalled.problem().unwrap().contains("not installed"));
        // The program, no socket: not running, and the message names the socket.
        std::fs::write(bin.join("bird"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(bin.join("bird"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dirs = [bin.clone()];
        let state = Bird::check_with(&socket, &dirs);
        assert_eq!(state, Bird::NotRunning(format!("no control socket {}", socket.display())));
        let message = state.problem().unwrap();
        assert!(message.starts_with("BIRD is installed but not running (no control socket "), "{message}");
        assert!(message.contains("bird_socket"), "{message}");
        // A socket file that nothing listens on any more (BIRD killed): not running.
        drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
        assert!(matches!(Bird::check_with(&socket, &dirs), Bird::NotRunning(why) if why.contains("refused")));
        std::fs::remove_file(&socket).unwrap();
        // A socket that accepts: running, whatever the program search finds.
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert_eq!(Bird::check_with(&socket, &dirs), Bird::Running);
        assert_eq!(Bird::check_with(&socket, &nowhere), Bird::Running);
        assert_eq!(Bird::Running.problem(), None);
    }

    #[test]
    fn the_bird_socket_is_configurable() {
        let c = Config::parse("[daemon]\nbird_socket = \"/run/bird/node1.ctl\"\n", Path::new("lb.toml")).unwrap();
        assert_eq!(c.daemon.bird_socket, Path::new("/run/bird/node1.ctl"));
        let c = Config::parse("", Path::new("lb.toml")).unwrap();
        assert_eq!(c.daemon.bird_socket, Path::new("/run/bird/bird.ctl"));
        let problems =
            Config::parse("[daemon]\nbird_socket = \"bird.ctl\"\n", Path::new("lb.toml")).unwrap_err().problems();
        assert_eq!(
            problems,
            [
                "lb.toml:2: daemon: bird_socket \"bird.ctl\" must be an absolute path (BIRD's `-s`, Debian: /run/bird/bird.ctl)"
            ]
        );
    }

    #[test]
    fn memory_routes_report_their_changes() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut r = MemoryRoutes::default();
        let change = r.apply(&BTreeSet::from([ip("203.0.113.10"), ip("203.0.113.11")])).unwrap();
        assert_eq!(change.announced.len(), 2);
        let change = r.apply(&BTreeSet::from([ip("203.0.113.11")])).unwrap();
        assert_eq!(change, Change { announced: vec![], withdrawn: vec![ip("203.0.113.10")] });
        assert!(r.apply(&r.announced()).unwrap().is_empty());
    }

    #[test]
    fn announce_settings_are_checked() {
        let vip = "[[vip]]\nname = \"web\"\naddress = \"203.0.113.10\"\nport = 80\nbackends = [ { address = \"198.51.100.1\" } ]\n";
        let c = Config::parse(&format!("{vip}announce = {{ min_healthy = 1 }}\n"), Path::new("lb.toml")).unwrap();
        assert_eq!(c.vips[0].announce, Some(crate::config::Announce { min_healthy: 1 }));
        assert!(
            c.warnings.iter().any(|w| w.to_string().starts_with("lb.toml:6: warning: vip \"web\": announced NAT VIP")),
            "{:?}",
            c.warnings
        );
        let c = Config::parse(&format!("{vip}announce = {{ min_healthy = 3 }}\n"), Path::new("lb.toml")).unwrap();
        assert!(c.warnings.iter().any(|w| w.message.contains("not announced until more are added")));
        let problems = |text: &str| Config::parse(text, Path::new("lb.toml")).unwrap_err().problems();
        assert_eq!(
            problems(&format!("{vip}announce = {{ min_healthy = 0 }}\n")),
            ["lb.toml:6: vip \"web\": announce.min_healthy must be 1-4096, got 0"]
        );
        assert_eq!(
            problems("[daemon]\nannounce_table = 254\n"),
            ["lb.toml:2: daemon: announce_table 254 is one of the kernel's own tables: choose another"]
        );
        assert_eq!(
            problems(&format!("{vip}announce = {{ min_healty = 1 }}\n"))[0],
            "lb.toml:6: unknown field `min_healty`, expected `min_healthy`"
        );
    }
}
