//! A host name resolved again (see `config::hosts`): its new addresses become backends, the
//! ones it no longer gives are drained and, after the hold, removed.
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lb_common::limits::MAX_BACKENDS;

use super::{BackendState, Origin, State, StateError, VipIdentity, initial_health};
use crate::config::VipConfig;
use crate::config::hosts::HostBackends;
use crate::config::rules;

/// What a resolution changed, by address.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    pub added: Vec<SocketAddr>,
    /// No longer given by the name: drained.
    pub vanished: Vec<SocketAddr>,
    /// Given by the name again: no longer drained.
    pub returned: Vec<SocketAddr>,
    /// Vanished for longer than the hold: removed.
    pub removed: Vec<SocketAddr>,
}

impl Resolved {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.vanished.is_empty() && self.returned.is_empty() && self.removed.is_empty()
    }
}

impl std::fmt::Display for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts = [
            ("added", &self.added),
            ("drained (no longer resolved)", &self.vanished),
            ("resolved again", &self.returned),
            ("removed (held long enough)", &self.removed),
        ];
        let words: Vec<String> = parts
            .iter()
            .filter(|(_, list)| !list.is_empty())
            .map(|(what, list)| {
                let list: Vec<String> = list.iter().map(|a| a.to_string()).collect();
                format!("{what} {}", list.join(" "))
            })
            .collect();
        f.write_str(&words.join("; "))
    }
}

/// Whether backend `b` of the previous state stays in VIP `new` though `new` does not list it:
/// its name is still configured and no longer gives its address (it lingers, drained, until
/// the hold has passed).
pub(super) fn lingers(new: &VipConfig, b: &BackendState) -> bool {
    b.host.as_ref().is_some_and(|h| new.hosts.iter().any(|t| &t.host == h && t.port == b.address.port()))
        && !new.backends.iter().any(|nb| nb.address == b.address)
}

impl State {
    /// Applies `addresses`, the usable addresses `host.host` resolves to now, to the VIP
    /// `vip`'s backends from that name. A backend some other way already has an address
    /// (written, or added through the API) is left alone.
    pub fn resolved(
        &mut self,
        vip: VipIdentity,
        host: &HostBackends,
        addresses: &[SocketAddr],
        now: Instant,
        hold: Duration,
    ) -> Result<Resolved, StateError> {
        let i = self
            .vips
            .iter()
            .position(|v| v.identity() == vip)
            .ok_or_else(|| StateError::UnknownVip(SocketAddr::new(vip.address, vip.port).to_string()))?;
        let from_name =
            |b: &BackendState| b.host.as_deref() == Some(host.host.as_str()) && b.address.port() == host.port;
        let mut out = Resolved::default();
        let mut kept = Vec::new();
        for b in std::mem::take(&mut self.vips[i].backends) {
            if !from_name(&b) {
                kept.push(b);
                continue;
            }
            let mut b = b;
            match (addresses.contains(&b.address), b.vanished) {
                (true, Some(_)) => {
                    b.vanished = None;
                    out.returned.push(b.address);
                }
                (true, None) => {}
                (false, None) => {
                    b.vanished = Some(now);
                    out.vanished.push(b.address);
                }
                (false, Some(since)) if now.duration_since(since) >= hold => {
                    self.backend_ids.free(b.id);
                    out.removed.push(b.address);
                    continue;
                }
                (false, Some(_)) => {}
            }
            kept.push(b);
        }
        self.vips[i].backends = kept;
        let v = &self.vips[i];
        let new: Vec<SocketAddr> = addresses.iter().copied().filter(|a| v.backend(*a).is_none()).collect();
        let rejected = |rule| StateError::Rejected { vip: v.label(), rule };
        rules::ring_room(v.backends.len() + new.len(), self.ring_size).map_err(rejected)?;
        for address in new {
            let id = self.backend_ids.alloc().ok_or(StateError::NoFreeId("backend", MAX_BACKENDS))?;
            self.vips[i].backends.push(BackendState {
                id,
                address,
                weight: host.weight,
                drained: false,
                health: initial_health(host.health.is_some()),
                check: host.health.clone(),
                origin: Origin::Config,
                host: Some(host.host.clone()),
                vanished: None,
            });
            out.added.push(address);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::config::Config;

    const HOLD: Duration = Duration::from_secs(60);

    /// A configuration whose VIP has 198.51.100.9 written and `app.test` resolving to `ips`.
    fn config(ips: &'static [&'static str]) -> Config {
        let text = "[[vip]]\nname = \"web\"\naddress = \"203.0.113.10\"\nport = 80\nbackends = [ { address = \"198.51.100.9\" }, { address = \"app.test\", weight = 7 } ]\n";
        let resolve: crate::config::hosts::Resolver =
            Arc::new(move |_, port| Ok(ips.iter().map(|ip| SocketAddr::new(ip.parse().unwrap(), port)).collect()));
        Config::parse_with(text, Path::new("lb.toml"), &resolve).unwrap_or_else(|e| panic!("{e}"))
    }

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// (address, effective weight, vanished) of the VIP's backends, in order.
    fn backends(s: &State) -> Vec<(SocketAddr, u32, bool)> {
        s.vips[0].backends.iter().map(|b| (b.address, b.effective_weight(), b.vanished.is_some())).collect()
    }

    #[test]
    fn new_addresses_join_vanished_ones_drain_then_go() {
        let c = config(&["198.51.100.1", "198.51.100.2"]);
        let mut s = State::from_config(&c, &State::default()).unwrap();
        let (vip, host, t0) = (s.vips[0].identity(), c.vips[0].hosts[0].clone(), Instant::now());
        let id_of_1 = s.vips[0].backend(sa("198.51.100.1:80")).unwrap().id;

        // .2 vanished, .3 appeared; the written address is not the name's to change.
        let r = s.resolved(vip, &host, &[sa("198.51.100.1:80"), sa("198.51.100.3:80")], t0, HOLD).unwrap();
        assert_eq!(r.added, [sa("198.51.100.3:80")]);
        assert_eq!(r.vanished, [sa("198.51.100.2:80")]);
        assert_eq!(r.to_string(), "added 198.51.100.3:80; drained (no longer resolved) 198.51.100.2:80");
        assert_eq!(
            backends(&s),
            [
                (sa("198.51.100.9:80"), 100, false),
                (sa("198.51.100.1:80"), 7, false),
                (sa("198.51.100.2:80"), 0, true),
                (sa("198.51.100.3:80"), 7, false)
            ]
        );
        assert_eq!(s.vips[0].backend(sa("198.51.100.1:80")).unwrap().id, id_of_1, "kept backends keep their id");

        // The same answer again changes nothing until the hold has passed; then .2 goes.
        let same = [sa("198.51.100.1:80"), sa("198.51.100.3:80")];
        assert!(s.resolved(vip, &host, &same, t0 + HOLD / 2, HOLD).unwrap().is_empty());
        let r = s.resolved(vip, &host, &same, t0 + HOLD, HOLD).unwrap();
        assert_eq!(r.removed, [sa("198.51.100.2:80")]);
        assert_eq!(backends(&s).len(), 3);

        // .3 vanishes and comes back before the hold: drained, then active again.
        s.resolved(vip, &host, &[sa("198.51.100.1:80")], t0 + HOLD, HOLD).unwrap();
        let r = s.resolved(vip, &host, &same, t0 + HOLD + HOLD / 2, HOLD).unwrap();
        assert_eq!(r.returned, [sa("198.51.100.3:80")]);
        assert!(backends(&s).iter().all(|(_, w, vanished)| *w > 0 && !vanished));
    }

    #[test]
    fn a_reload_keeps_vanished_addresses_drained() {
        let before = config(&["198.51.100.1", "198.51.100.2"]);
        let s = State::from_config(&before, &State::default()).unwrap();
        let id_of_2 = s.vips[0].backend(sa("198.51.100.2:80")).unwrap().id;
        let after = State::from_config(&config(&["198.51.100.1"]), &s).unwrap();
        let two = after.vips[0].backend(sa("198.51.100.2:80")).expect("still there, drained");
        assert_eq!((two.id, two.effective_weight(), two.vanished.is_some()), (id_of_2, 0, true));
    }
}
