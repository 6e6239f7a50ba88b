//! `lb-ctl backends add|remove|drain|undrain` on a node in a fleet: the change is written to
//! the fleet (every node applies it, this one too), not to this node alone. Read, edit the
//! VIP's value, check the result with this node's file as a reload would, write guarded by
//! the revision read (retried from a fresh read if another write came between).
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use super::record::SharedView;
use super::state::{Snapshot, VIPS, edit_vip};
use super::store::{Store, StoreError};
use crate::api::types::{BackendRequest, Changed};
use crate::api::{ApiError, Request, Response};
use crate::config::fleet::FleetSettings;

/// Writes tried before giving up when other writes keep coming between read and write.
const ATTEMPTS: usize = 3;
/// How long the answer waits for this node to apply the write.
const APPLIED_WAIT: Duration = Duration::from_secs(2);

fn unavailable(message: impl Into<String>) -> ApiError {
    ApiError::new(axum::http::StatusCode::SERVICE_UNAVAILABLE, message)
}

/// What a node needs to write to its fleet.
#[derive(Clone)]
pub struct FleetEditor {
    pub settings: FleetSettings,
    /// The node's file (its `[daemon]` etc.), to check a change as this node will apply it.
    pub config: std::path::PathBuf,
    pub view: SharedView,
}

/// Why an attempt failed: etcd (worth a new connection), or the change itself.
enum Failure {
    Etcd(StoreError),
    Api(ApiError),
}

#[derive(Clone, Copy)]
enum Kind {
    Add,
    Remove,
    Drain,
    Undrain,
}

impl FleetEditor {
    /// The fleet's answer to `request` if it is a backend change; None for other requests.
    pub async fn handle(&self, request: &Request) -> Option<Result<Response, ApiError>> {
        let (kind, r) = match request {
            Request::Add(r) => (Kind::Add, r),
            Request::Remove(r) => (Kind::Remove, r),
            Request::Drain(r) => (Kind::Drain, r),
            Request::Undrain(r) => (Kind::Undrain, r),
            _ => return None,
        };
        Some(self.change(kind, r).await.map(Response::Changed))
    }

    async fn change(&self, kind: Kind, r: &BackendRequest) -> Result<Changed, ApiError> {
        let unreachable = |e: StoreError| {
            unavailable(format!(
                "this node is in the fleet {} and changes are made there, but etcd cannot be reached ({e}); nothing was changed",
                self.settings.prefix
            ))
        };
        // The daemon's one connection; after a failure once more from a new one (to another
        // member if that one is gone), since the cluster may serve where a member does not.
        let mut result = self.attempt(kind, r).await;
        if let Err(Failure::Etcd(_)) = &result {
            Store::forget(&self.settings);
            result = self.attempt(kind, r).await;
        }
        match result {
            Ok(changed) => Ok(changed),
            Err(Failure::Etcd(e)) => {
                Store::forget(&self.settings);
                Err(unreachable(e))
            }
            Err(Failure::Api(e)) => Err(e),
        }
    }

    async fn attempt(&self, kind: Kind, r: &BackendRequest) -> Result<Changed, Failure> {
        let mut store = Store::shared(&self.settings).await.map_err(Failure::Etcd)?;
        for _ in 0..ATTEMPTS {
            let seen = store.read().await.map_err(Failure::Etcd)?;
            let (label, backend, next) = edited(&seen, kind, r, &self.config).map_err(Failure::Api)?;
            match store.write(&seen, &next.values, &format!("backends change on node {}", self.settings.node)).await {
                Ok(revision) => return Ok(self.answer(kind, label, backend, revision).await),
                Err(StoreError::Conflict(_)) => continue,
                Err(e) => return Err(Failure::Etcd(e)),
            }
        }
        Err(Failure::Api(unavailable("the fleet kept changing under this change; nothing was written: try again")))
    }

    async fn answer(&self, kind: Kind, vip: String, backend: SocketAddr, revision: i64) -> Changed {
        let done = match kind {
            Kind::Add => "added",
            Kind::Remove => "removed",
            Kind::Drain => "drained",
            Kind::Undrain => "undrained",
        };
        // The answer comes once this node applied it, as a change made here would.
        let waited = tokio::time::Instant::now();
        let applied = loop {
            if self.view.lock().unwrap().applied_revision >= revision {
                break true;
            }
            if waited.elapsed() > APPLIED_WAIT {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let here = if applied { "applied here" } else { "not applied here yet" };
        let message = format!(
            "{vip}: backend {backend} {done} in the fleet {} (revision {revision}): every node applies it ({here})",
            self.settings.prefix
        );
        tracing::info!(vip = %vip, backend = %backend, revision, "{message}");
        Changed { vip, backend, backend_id: 0, message }
    }
}

/// The fleet state with the change made; refused (nothing written) when it does not apply
/// or the result would not load on this node.
fn edited(
    seen: &Snapshot,
    kind: Kind,
    r: &BackendRequest,
    config: &Path,
) -> Result<(String, SocketAddr, Snapshot), ApiError> {
    let label = find_vip(seen, &r.vip)?;
    let key = format!("{VIPS}{label}");
    let value = &seen.values[&key];
    let table: toml::Table =
        value.parse().map_err(|_| ApiError::bad_request(format!("etcd key {key} is not a TOML table")))?;
    let port = table.get("port").and_then(|p| p.as_integer()).unwrap_or(0) as u16;
    let backend = crate::state::parse_backend(&r.address, port)?;
    let text = backend.to_string();
    let listed = |t: &toml::Table| backends(t, port).contains(&backend);
    let drained = |t: &toml::Table| {
        t.get("drained").and_then(|d| d.as_array()).is_some_and(|a| a.iter().any(|v| v.as_str() == Some(&text)))
    };
    let not_found = || ApiError::not_found(format!("VIP {label:?} in the fleet has no backend {backend}"));
    let new_value = edit_vip(value, |t| {
        match kind {
            Kind::Add => {
                if listed(t) {
                    return Err(format!("VIP {label:?} in the fleet already has backend {backend}"));
                }
                let mut b = toml::Table::new();
                b.insert("address".into(), backend.ip().to_string().into());
                b.insert("port".into(), i64::from(backend.port()).into());
                if let Some(w) = r.weight {
                    b.insert("weight".into(), i64::try_from(w).unwrap_or(i64::MAX).into());
                }
                let list = t.entry("backends").or_insert_with(|| toml::Value::Array(Vec::new()));
                list.as_array_mut().ok_or("backends is not a list")?.push(toml::Value::Table(b));
            }
            Kind::Remove => {
                if !listed(t) {
                    return Err(not_found().to_string());
                }
                if let Some(list) = t.get_mut("backends").and_then(|b| b.as_array_mut()) {
                    list.retain(|b| address(b, port) != Some(backend));
                }
                undrain(t, &text);
            }
            Kind::Drain => {
                if !listed(t) {
                    return Err(not_found().to_string());
                }
                if drained(t) {
                    return Err(format!("VIP {label:?}: backend {backend} is drained in the fleet already"));
                }
                let list = t.entry("drained").or_insert_with(|| toml::Value::Array(Vec::new()));
                list.as_array_mut().ok_or("drained is not a list")?.push(text.clone().into());
            }
            Kind::Undrain => {
                if !drained(t) {
                    return Err(format!("VIP {label:?}: backend {backend} is not drained in the fleet"));
                }
                undrain(t, &text);
            }
        }
        Ok(())
    })
    .map_err(ApiError::bad_request)?;
    let mut next = seen.clone();
    next.values.insert(key, new_value);
    // Checked as this node would apply it: a change the fleet would refuse is not written.
    next.compose(config)
        .map_err(|problems| ApiError::bad_request(format!("refused, nothing written: {}", problems.join("; "))))?;
    Ok((label, backend, next))
}

fn undrain(t: &mut toml::Table, text: &str) {
    if let Some(list) = t.get_mut("drained").and_then(|d| d.as_array_mut()) {
        list.retain(|v| v.as_str() != Some(text));
        if list.is_empty() {
            t.remove("drained");
        }
    }
}

fn address(b: &toml::Value, default_port: u16) -> Option<SocketAddr> {
    let ip = b.get("address")?.as_str()?.parse().ok()?;
    let port = b.get("port").and_then(|p| p.as_integer()).map_or(default_port, |p| p as u16);
    Some(SocketAddr::new(ip, port))
}

fn backends(t: &toml::Table, port: u16) -> Vec<SocketAddr> {
    let list = t.get("backends").and_then(|b| b.as_array());
    list.map(|l| l.iter().filter_map(|b| address(b, port)).collect()).unwrap_or_default()
}

/// The fleet label of the VIP `reference` names: its name, `ADDR:PORT/PROTOCOL`,
/// `ADDR:PORT`, or `ADDR` when only one VIP has that address.
fn find_vip(seen: &Snapshot, reference: &str) -> Result<String, ApiError> {
    let labels: Vec<(&str, Option<String>)> = seen
        .vip_labels()
        .into_iter()
        .map(|l| {
            let name = seen.values[&format!("{VIPS}{l}")]
                .parse::<toml::Table>()
                .ok()
                .and_then(|t| t.get("name").and_then(|n| n.as_str()).map(String::from));
            (l, name)
        })
        .collect();
    let matches = |pred: &dyn Fn(&str, Option<&str>) -> bool| -> Vec<&str> {
        labels.iter().filter(|(l, n)| pred(l, n.as_deref())).map(|(l, _)| *l).collect()
    };
    let address_of =
        |l: &str| l.rsplit_once(':').map(|(a, _)| a.trim_start_matches('[').trim_end_matches(']').to_string());
    for found in [
        matches(&|_, n| n == Some(reference)),
        matches(&|l, _| l == reference),
        matches(&|l, _| l.rsplit_once('/').is_some_and(|(a, _)| a == reference)),
        matches(&|l, _| address_of(l).as_deref() == Some(reference.trim_start_matches('[').trim_end_matches(']'))),
    ] {
        match found.as_slice() {
            [one] => return Ok(one.to_string()),
            [] => continue,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "{reference:?} names several VIPs of the fleet ({}): use ADDR:PORT/PROTOCOL",
                    found.join(", ")
                )));
            }
        }
    }
    Err(ApiError::not_found(format!("the fleet has no VIP {reference:?}")))
}
