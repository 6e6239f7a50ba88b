//! The desired state of the balancer — VIPs, their backends with weight, drain and health —
//! and how it becomes map contents ([`plan`]).
//!
//! The state is built from the configuration ([`State::from_config`]) and then changed by API
//! calls and health transitions. Every change is checked before it is made: a refused change
//! leaves the state as it was. Only the daemon's writer task holds a `State`.
pub mod ids;
pub mod plan;
mod resolved;
mod saved;

pub use resolved::Resolved;
pub use saved::{ApiChange, HealthChange, SavedState, SavedVip};

use std::net::{IpAddr, SocketAddr};

use lb_common::limits::{MAX_BACKENDS, MAX_VIPS};
use serde::{Deserialize, Serialize};

pub use crate::config::VipIdentity;
use crate::config::rules::{self, BackendRule};
use crate::config::{Config, HealthSpec, VipSpec};
use ids::IdAllocator;

/// A refused change, or a reference to something that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// No VIP has this name or address.
    #[error("unknown VIP {0:?}")]
    UnknownVip(String),
    /// An address matches more than one VIP.
    #[error("VIP {reference:?} is ambiguous: it matches {candidates}; name one with ADDR:PORT/PROTOCOL")]
    AmbiguousVip { reference: String, candidates: String },
    /// The VIP has no such backend.
    #[error("VIP {vip:?} has no backend {backend}")]
    UnknownBackend { vip: String, backend: SocketAddr },
    /// The VIP already has this backend.
    #[error("VIP {vip:?} already has backend {backend}")]
    DuplicateBackend { vip: String, backend: SocketAddr },
    /// The backend breaks a rule (weight, address).
    #[error("VIP {vip:?}: {rule}")]
    Rejected { vip: String, rule: BackendRule },
    /// An address that does not parse.
    #[error("malformed address {0:?}: expected {1}")]
    MalformedAddress(String, &'static str),
    /// Every id is taken.
    #[error("no free {0} id (at most {1})")]
    NoFreeId(&'static str, u32),
    /// The request does not apply to this VIP.
    #[error("{0}")]
    NotApplicable(String),
}

/// A backend's health as last decided by its checker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Health {
    /// No health check configured: always counts as healthy.
    Unchecked,
    /// Checked, but not yet `rise` successes in a row since it was added: out of the ring.
    Pending,
    Up,
    Down,
}

impl Health {
    /// Whether the backend may be in the ring.
    pub fn is_usable(self) -> bool {
        matches!(self, Health::Unchecked | Health::Up)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unchecked => "unchecked",
            Health::Pending => "pending",
            Health::Up => "up",
            Health::Down => "down",
        }
    }
}

/// Where a backend comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    Config,
    /// Added through the API: lasts until the next reload or restart.
    Api,
}

/// One backend of a VIP.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendState {
    /// Index in BACKENDS and BACKEND_STATS; unique over all VIPs.
    pub id: u32,
    pub address: SocketAddr,
    /// Configured weight (the ring uses 0 while drained).
    pub weight: u32,
    /// Drained through the API: no new flows, established ones stay.
    pub drained: bool,
    pub health: Health,
    pub check: Option<HealthSpec>,
    pub origin: Origin,
    /// The host name it was resolved from (lb.toml `address = "name"`).
    pub host: Option<String>,
    /// Since when its host name no longer resolves to it: drained, removed after
    /// `daemon.resolve_hold` (see `resolved.rs`).
    pub vanished: Option<std::time::Instant>,
}

impl BackendState {
    /// The weight the ring gets if the backend is healthy.
    pub fn effective_weight(&self) -> u32 {
        if self.drained || self.vanished.is_some() { 0 } else { self.weight }
    }
    /// `active`, or `draining` (drained through the API, or configured with weight 0).
    pub fn admin_state(&self) -> &'static str {
        if self.effective_weight() == 0 { "draining" } else { "active" }
    }
}

/// One VIP.
#[derive(Clone, Debug, PartialEq)]
pub struct VipState {
    /// Index of the VIP's ring in RINGS and of its counters in VIP_STATS.
    pub id: u32,
    /// The VIP as configured; its health table is what backends added at run time get.
    pub spec: VipSpec,
    pub backends: Vec<BackendState>,
}

impl std::ops::Deref for VipState {
    type Target = VipSpec;
    fn deref(&self) -> &VipSpec {
        &self.spec
    }
}

impl VipState {
    pub fn backend(&self, address: SocketAddr) -> Option<&BackendState> {
        self.backends.iter().find(|b| b.address == address)
    }
}

/// The whole desired state.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    pub ring_size: u32,
    pub hash_seed: u32,
    pub new_flow_budget: u32,
    pub nexthop_ttl_ms: u32,
    pub vips: Vec<VipState>,
    vip_ids: IdAllocator,
    backend_ids: IdAllocator,
    /// Backends of the file removed through the API since it was loaded (kept across
    /// restarts, undone by a reload).
    removed_by_api: Vec<(VipIdentity, SocketAddr)>,
    /// `lb-ctl node drain`: this node announces no VIP (and keeps forwarding). Kept across
    /// reloads and restarts until `node undrain`.
    pub node_drained: bool,
    /// `[cluster]` is configured: the program reports the flows it records, to be shared.
    pub share_flows: bool,
}

impl Default for State {
    fn default() -> Self {
        State {
            ring_size: lb_common::limits::DEFAULT_RING_SIZE,
            hash_seed: 0,
            new_flow_budget: lb_common::limits::DEFAULT_NEW_FLOW_BUDGET,
            nexthop_ttl_ms: lb_common::limits::DEFAULT_NEXTHOP_TTL_MS,
            vips: Vec::new(),
            vip_ids: IdAllocator::new(MAX_VIPS),
            backend_ids: IdAllocator::new(MAX_BACKENDS),
            removed_by_api: Vec::new(),
            node_drained: false,
            share_flows: false,
        }
    }
}

impl State {
    /// The state `config` describes. VIPs and backends that `previous` already has keep their
    /// ids, and backends their health and health history; new ones get fresh ids.
    pub fn from_config(config: &Config, previous: &State) -> Result<State, StateError> {
        let mut vip_ids = previous.vip_ids.clone();
        let mut backend_ids = previous.backend_ids.clone();
        // Free what disappears first, so its ids count as used-then-freed for round-robin.
        let identities: Vec<VipIdentity> = config.vips.iter().map(|v| v.identity()).collect();
        for old in &previous.vips {
            let new = config.vips.iter().zip(&identities).find(|(_, id)| **id == old.identity());
            match new {
                None => {
                    vip_ids.free(old.id);
                    old.backends.iter().for_each(|b| backend_ids.free(b.id));
                }
                Some((new, _)) => {
                    for b in &old.backends {
                        if !new.backends.iter().any(|nb| nb.address == b.address) && !resolved::lingers(new, b) {
                            backend_ids.free(b.id);
                        }
                    }
                }
            }
        }
        let mut vips = Vec::new();
        for (v, identity) in config.vips.iter().zip(identities) {
            let old = previous.vips.iter().find(|o| o.identity() == identity);
            let id = match old {
                Some(o) => o.id,
                None => vip_ids.alloc().ok_or(StateError::NoFreeId("VIP", MAX_VIPS))?,
            };
            let mut backends = Vec::new();
            for b in &v.backends {
                let old_b = old.and_then(|o| o.backend(b.address));
                let (bid, health) = match old_b {
                    Some(ob) => (ob.id, carried_health(ob.health, b.health.is_some())),
                    None => (
                        backend_ids.alloc().ok_or(StateError::NoFreeId("backend", MAX_BACKENDS))?,
                        initial_health(b.health.is_some()),
                    ),
                };
                backends.push(BackendState {
                    id: bid,
                    address: b.address,
                    weight: b.weight,
                    drained: false,
                    health,
                    check: b.health.clone(),
                    origin: Origin::Config,
                    host: b.host.clone(),
                    vanished: None,
                });
            }
            // Addresses a name gave before and not now stay drained, as between resolutions.
            let lingering = old.iter().flat_map(|o| &o.backends).filter(|b| resolved::lingers(v, b));
            backends.extend(
                lingering
                    .map(|b| BackendState { vanished: b.vanished.or(Some(std::time::Instant::now())), ..b.clone() }),
            );
            vips.push(VipState { id, spec: v.spec.clone(), backends });
        }
        Ok(State {
            ring_size: config.daemon.ring_size,
            hash_seed: config.daemon.hash_seed,
            new_flow_budget: config.daemon.new_flow_budget,
            nexthop_ttl_ms: config.daemon.nexthop_ttl_ms,
            vips,
            vip_ids,
            backend_ids,
            removed_by_api: Vec::new(),
            node_drained: previous.node_drained,
            share_flows: config.cluster.is_some(),
        })
    }

    /// The VIP `reference` names: its name, `ADDR:PORT/PROTOCOL`, `ADDR:PORT`, or `ADDR`
    /// when only one VIP has that address.
    pub fn find_vip(&self, reference: &str) -> Result<&VipState, StateError> {
        let i = self.vip_index(reference)?;
        Ok(&self.vips[i])
    }

    fn vip_index(&self, reference: &str) -> Result<usize, StateError> {
        if let Some(i) = self.vips.iter().position(|v| v.name.as_deref() == Some(reference)) {
            return Ok(i);
        }
        let (addr_part, proto) = match reference.rsplit_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (reference, None),
        };
        let matches: Vec<usize> = if let Ok(sa) = addr_part.parse::<SocketAddr>() {
            self.positions(|v| v.address == sa.ip() && v.port == sa.port())
        } else if let Ok(ip) = addr_part.trim_matches(['[', ']']).parse::<IpAddr>() {
            self.positions(|v| v.address == ip)
        } else {
            return Err(StateError::UnknownVip(reference.into()));
        };
        let matches: Vec<usize> =
            matches.into_iter().filter(|&i| proto.is_none_or(|p| self.vips[i].protocol.as_str() == p)).collect();
        match matches.as_slice() {
            [] => Err(StateError::UnknownVip(reference.into())),
            [one] => Ok(*one),
            many => Err(StateError::AmbiguousVip {
                reference: reference.into(),
                candidates: many.iter().map(|&i| self.vips[i].address_label()).collect::<Vec<_>>().join(", "),
            }),
        }
    }

    fn positions(&self, pred: impl Fn(&VipState) -> bool) -> Vec<usize> {
        self.vips.iter().enumerate().filter(|(_, v)| pred(v)).map(|(i, _)| i).collect()
    }

    /// Adds backend `address` to VIP `vip` with the VIP's health check. Returns its id.
    pub fn add_backend(&mut self, vip: &str, address: &str, weight: Option<u64>) -> Result<u32, StateError> {
        let i = self.vip_index(vip)?;
        let v = &self.vips[i];
        let address = parse_backend(address, v.port)?;
        if v.backend(address).is_some() {
            return Err(StateError::DuplicateBackend { vip: v.label(), backend: address });
        }
        let rejected = |rule| StateError::Rejected { vip: v.label(), rule };
        let weight = match weight {
            None => crate::config::DEFAULT_WEIGHT,
            Some(w) => rules::weight(i64::try_from(w).unwrap_or(i64::MAX)).map_err(rejected)?,
        };
        rules::address(v.forwarding, SocketAddr::new(v.address, v.port), v.encap_source, address).map_err(rejected)?;
        rules::ring_room(v.backends.len() + 1, self.ring_size).map_err(rejected)?;
        let id = self.backend_ids.alloc().ok_or(StateError::NoFreeId("backend", MAX_BACKENDS))?;
        let v = &mut self.vips[i];
        let check = v.health.clone();
        v.backends.push(BackendState {
            id,
            address,
            weight,
            drained: false,
            health: initial_health(check.is_some()),
            check,
            origin: Origin::Api,
            host: None,
            vanished: None,
        });
        Ok(id)
    }

    /// Removes a backend; returns its id (now free).
    pub fn remove_backend(&mut self, vip: &str, address: &str) -> Result<u32, StateError> {
        let (i, j) = self.backend_index(vip, address)?;
        let b = self.vips[i].backends.remove(j);
        self.backend_ids.free(b.id);
        if b.origin == Origin::Config {
            self.removed_by_api.push((self.vips[i].identity(), b.address));
        }
        Ok(b.id)
    }

    /// Drains a backend: out of the ring, its established flows stay. Returns its id.
    pub fn drain_backend(&mut self, vip: &str, address: &str) -> Result<u32, StateError> {
        let (i, j) = self.backend_index(vip, address)?;
        let b = &mut self.vips[i].backends[j];
        b.drained = true;
        Ok(b.id)
    }

    /// Undoes a drain made through the API: the backend takes new flows again (once healthy).
    /// Returns its id. A backend that is not drained is refused, changing nothing.
    pub fn undrain_backend(&mut self, vip: &str, address: &str) -> Result<u32, StateError> {
        let (i, j) = self.backend_index(vip, address)?;
        let (label, b) = (self.vips[i].label(), &mut self.vips[i].backends[j]);
        if !b.drained {
            let why =
                if b.weight == 0 { " through the API (its weight is 0 in the file: change the file)" } else { "" };
            return Err(StateError::NotApplicable(format!("VIP {label:?}: backend {} is not drained{why}", b.address)));
        }
        b.drained = false;
        Ok(b.id)
    }

    fn backend_index(&self, vip: &str, address: &str) -> Result<(usize, usize), StateError> {
        let i = self.vip_index(vip)?;
        let v = &self.vips[i];
        let address = parse_backend(address, v.port)?;
        let j = v
            .backends
            .iter()
            .position(|b| b.address == address)
            .ok_or(StateError::UnknownBackend { vip: v.label(), backend: address })?;
        Ok((i, j))
    }

    /// Records a health transition of backend `id`; false if no backend has that id.
    pub fn set_health(&mut self, id: u32, health: Health) -> bool {
        match self.backend_by_id_mut(id) {
            Some(b) => {
                b.health = health;
                true
            }
            None => false,
        }
    }

    /// The backend with id `id`, and its VIP.
    pub fn backend_by_id(&self, id: u32) -> Option<(&VipState, &BackendState)> {
        self.vips.iter().find_map(|v| v.backends.iter().find(|b| b.id == id).map(|b| (v, b)))
    }

    fn backend_by_id_mut(&mut self, id: u32) -> Option<&mut BackendState> {
        self.vips.iter_mut().flat_map(|v| v.backends.iter_mut()).find(|b| b.id == id)
    }
}

/// A backend address as given to the API: `ADDR:PORT`, or `ADDR` for the VIP's port.
pub fn parse_backend(text: &str, default_port: u16) -> Result<SocketAddr, StateError> {
    if let Ok(sa) = text.parse::<SocketAddr>() {
        if sa.port() == 0 {
            return Err(StateError::MalformedAddress(text.into(), "a port in 1-65535"));
        }
        return Ok(sa);
    }
    match text.trim_matches(['[', ']']).parse::<IpAddr>() {
        Ok(ip) => Ok(SocketAddr::new(ip, default_port)),
        Err(_) => Err(StateError::MalformedAddress(text.into(), "ADDR:PORT or ADDR (IPv6 as [ADDR]:PORT)")),
    }
}

fn initial_health(checked: bool) -> Health {
    if checked { Health::Pending } else { Health::Unchecked }
}

/// Health of a backend that stays across a reload: kept if still checked; a backend that was
/// serving unchecked and gets a check starts `Up` (its check may take it down), not `Pending`.
fn carried_health(old: Health, checked: bool) -> Health {
    match (old, checked) {
        (_, false) => Health::Unchecked,
        (Health::Unchecked, true) => Health::Up,
        (h, true) => h,
    }
}

#[cfg(test)]
mod quic_tests;
#[cfg(test)]
mod tests;
