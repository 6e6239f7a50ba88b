//! What a daemon saves beside the pinned maps so that a restart (crash, kill -9, upgrade)
//! brings back the same running state: the ids (connection-table entries name backends by
//! id), the last known health of every checked backend (a backend known dead stays out of
//! the ring until its check says otherwise), and the changes made through the API since the
//! file was loaded (added, drained and removed backends). A reload, by contrast, makes the
//! file the truth again.
use std::collections::BTreeMap;
use std::net::SocketAddr;

use lb_common::limits::MAX_BACKENDS;
use serde::{Deserialize, Serialize};

use super::ids::IdAllocator;
use super::{BackendState, Health, Origin, State, StateError, VipIdentity, VipState, initial_health};
use crate::config::{AllDownPolicy, Forwarding, HashMode, Protocol, VipSpec};

/// The saved state (the "ids file"). Every field added after the first version has a
/// default, so files of older versions still load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedState {
    /// Ring size the maps were written with (a restart with another one cannot reuse them).
    #[serde(default)]
    pub ring_size: Option<u32>,
    pub vips: Vec<SavedVip>,
    pub vip_ids: IdAllocator,
    pub backend_ids: IdAllocator,
    /// Last known health of checked backends, by backend id.
    #[serde(default)]
    pub health: BTreeMap<u32, Health>,
    /// Changes made through the API since the file was loaded, in order.
    #[serde(default)]
    pub api_changes: Vec<ApiChange>,
    /// The node was drained (`lb-ctl node drain`): it announces nothing, also after a restart.
    #[serde(default)]
    pub node_drained: bool,
    /// When and why each checked backend's health last changed, by backend id: a restart
    /// shows them again (`backends list`'s HEALTH SINCE and LAST CHANGE) rather than "-".
    /// Filled in by the daemon's writer, which keeps them.
    #[serde(default)]
    pub health_changes: BTreeMap<u32, HealthChange>,
}

/// A backend's last health change, as saved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthChange {
    /// Seconds since the Unix epoch.
    pub at_unix: u64,
    pub reason: String,
}

/// One VIP's ids in a [`SavedState`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedVip {
    pub identity: VipIdentity,
    pub id: u32,
    /// `(address, backend id)`.
    pub backends: Vec<(SocketAddr, u32)>,
}

/// A change made through the API that the file does not hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "kebab-case")]
pub enum ApiChange {
    /// `backends add` (drained too when `drained`).
    Added { vip: VipIdentity, address: SocketAddr, id: u32, weight: u32, drained: bool },
    /// `backends drain` of a backend of the file.
    Drained { vip: VipIdentity, address: SocketAddr },
    /// `backends remove` of a backend of the file.
    Removed { vip: VipIdentity, address: SocketAddr },
}

impl std::fmt::Display for ApiChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let vip = |v: &VipIdentity| std::net::SocketAddr::new(v.address, v.port);
        match self {
            ApiChange::Added { vip: v, address, drained, .. } => {
                write!(f, "add of {address} to {}{}", vip(v), if *drained { " (drained)" } else { "" })
            }
            ApiChange::Drained { vip: v, address } => write!(f, "drain of {address} of {}", vip(v)),
            ApiChange::Removed { vip: v, address } => write!(f, "removal of {address} from {}", vip(v)),
        }
    }
}

impl State {
    /// The state to save.
    pub fn saved(&self) -> SavedState {
        let backends = || self.vips.iter().flat_map(|v| v.backends.iter().map(move |b| (v, b)));
        SavedState {
            ring_size: Some(self.ring_size),
            vips: self
                .vips
                .iter()
                .map(|v| SavedVip {
                    identity: v.identity(),
                    id: v.id,
                    backends: v.backends.iter().map(|b| (b.address, b.id)).collect(),
                })
                .collect(),
            vip_ids: self.vip_ids.clone(),
            backend_ids: self.backend_ids.clone(),
            health: backends().filter(|(_, b)| b.check.is_some()).map(|(_, b)| (b.id, b.health)).collect(),
            api_changes: self.api_changes(),
            node_drained: self.node_drained,
            health_changes: BTreeMap::new(),
        }
    }

    /// How the running set differs from the file: what a restart keeps and a reload undoes.
    pub fn api_changes(&self) -> Vec<ApiChange> {
        let mut changes = Vec::new();
        for v in &self.vips {
            for b in &v.backends {
                let (vip, address) = (v.identity(), b.address);
                match b.origin {
                    Origin::Api => {
                        changes.push(ApiChange::Added { vip, address, id: b.id, weight: b.weight, drained: b.drained })
                    }
                    Origin::Config if b.drained => changes.push(ApiChange::Drained { vip, address }),
                    Origin::Config => {}
                }
            }
        }
        changes.extend(self.removed_by_api.iter().map(|&(vip, address)| ApiChange::Removed { vip, address }));
        changes
    }

    /// A skeleton state holding only what a previous run saved, to pass to
    /// [`State::from_config`] as `previous`: ids, and the last known health. Its VIPs carry
    /// no settings.
    pub fn from_saved(saved: &SavedState) -> State {
        let vips = saved
            .vips
            .iter()
            .map(|SavedVip { identity, id, backends }| VipState {
                id: *id,
                spec: VipSpec {
                    name: None,
                    address: identity.address,
                    port: identity.port,
                    protocol: if identity.ip_proto == lb_common::ip_proto::UDP { Protocol::Udp } else { Protocol::Tcp },
                    forwarding: Forwarding::Nat,
                    hash: HashMode::Ip,
                    encap_source: None,
                    all_down: AllDownPolicy::Forward,
                    health: None,
                    proxy: None,
                    announce: None,
                    quic: None,
                },
                backends: backends
                    .iter()
                    .map(|(address, id)| BackendState {
                        id: *id,
                        address: *address,
                        weight: 0,
                        drained: false,
                        // Files of older versions kept no health: such backends start over.
                        health: saved.health.get(id).copied().unwrap_or(Health::Pending),
                        check: None,
                        host: None,
                        vanished: None,
                        origin: Origin::Config,
                    })
                    .collect(),
            })
            .collect();
        let mut vip_ids = saved.vip_ids.clone();
        let mut backend_ids = saved.backend_ids.clone();
        for v in &saved.vips {
            vip_ids.reserve(v.id);
            v.backends.iter().for_each(|(_, b)| backend_ids.reserve(*b));
        }
        State { vips, vip_ids, backend_ids, node_drained: saved.node_drained, ..State::default() }
    }

    /// The skeleton's VIPs as the maps a restart found hold them (`found`: VIPS): each one's
    /// forwarding, and the ones the maps lack are the proxy's. The skeleton then says what the
    /// maps hold (`MapContents::of`): the first apply writes what the file changed, and removes
    /// only what is there.
    pub fn as_found(mut self, found: &[(lb_common::vip::VipKey, lb_common::vip::VipInfo)]) -> State {
        use lb_common::vip::forwarding;
        for v in &mut self.vips {
            let key = super::plan::vip_key(v);
            v.spec.forwarding = match found.iter().find(|(k, _)| *k == key).map(|(_, info)| info.forwarding) {
                None => Forwarding::Proxy,
                Some(forwarding::DSR_IPIP) => Forwarding::DsrIpip,
                Some(forwarding::DSR_L2) => Forwarding::DsrL2,
                Some(forwarding::DSR_GUE) => Forwarding::DsrGue,
                Some(_) => Forwarding::Nat,
            };
        }
        self
    }

    /// Makes again, after a restart, the API changes a previous run saved: added backends come
    /// back with their ids and last known health, drains and removals hold. Changes about
    /// VIPs the file no longer has are dropped (and logged).
    pub fn restore_api_changes(&mut self, saved: &SavedState) -> Result<(), StateError> {
        for change in &saved.api_changes {
            let (ApiChange::Added { vip, address, .. }
            | ApiChange::Drained { vip, address }
            | ApiChange::Removed { vip, address }) = change;
            let Some(i) = self.vips.iter().position(|v| v.identity() == *vip) else {
                tracing::warn!(vip = %std::net::SocketAddr::new(vip.address, vip.port), backend = %address, "a saved API change names a VIP the file no longer has; dropped");
                continue;
            };
            let present = self.vips[i].backends.iter().position(|b| b.address == *address);
            match (change, present) {
                (&ApiChange::Added { id, weight, drained, .. }, None) => {
                    let id = if self.backend_ids.try_reserve(id) {
                        id
                    } else {
                        tracing::warn!(backend = %address, id, "a restored API backend's id is taken; its flows are placed again");
                        self.backend_ids.alloc().ok_or(StateError::NoFreeId("backend", MAX_BACKENDS))?
                    };
                    let check = self.vips[i].health.clone();
                    let health = saved.health.get(&id).copied().unwrap_or(initial_health(check.is_some()));
                    let health = if check.is_some() { health } else { Health::Unchecked };
                    self.vips[i].backends.push(BackendState {
                        id,
                        address: *address,
                        weight,
                        drained,
                        health,
                        check,
                        origin: Origin::Api,
                        host: None,
                        vanished: None,
                    });
                }
                (ApiChange::Drained { .. }, Some(j)) => self.vips[i].backends[j].drained = true,
                (ApiChange::Removed { .. }, Some(j)) => {
                    let b = self.vips[i].backends.remove(j);
                    self.backend_ids.free(b.id);
                    self.removed_by_api.push((*vip, b.address));
                }
                // The file now has the added backend, or no longer has the drained/removed one.
                _ => {}
            }
        }
        Ok(())
    }
}
