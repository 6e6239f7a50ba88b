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

/// Process names of the routing daemons that can announce the table: BIRD (documented in
/// `docs/bird.conf`), FRR's bgpd and GoBGP.
const ROUTING_DAEMONS: &[&str] = &["bird", "bgpd", "gobgpd"];

/// The routing daemon running on this host, if any (by process name, in any namespace).
pub fn routing_daemon() -> Option<String> {
    let entries = std::fs::read_dir("/proc").ok()?;
    entries.flatten().find_map(|e| {
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        let name = comm.trim();
        ROUTING_DAEMONS.contains(&name).then(|| name.to_string())
    })
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
