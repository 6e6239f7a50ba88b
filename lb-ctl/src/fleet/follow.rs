//! A node following the fleet: read the whole state, apply it through the daemon's one writer
//! (as one reload), then watch from the next revision and apply each change in revision
//! order; record the node under a lease. When etcd is lost the node keeps its last state and
//! keeps forwarding (nothing here is on the data plane's path), says so, and on reconnect
//! reads the whole state again (which also covers a compacted watch).
use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{EventType, WatchOptions};

use super::record::{BackendRecord, NodeRecord, SharedView};
use super::state::{GENERATION, STATE, Snapshot};
use super::store::{REQUEST_TIMEOUT, Store, StoreError};
use crate::api::{Request, Response};
use crate::config::fleet::FleetSettings;
use crate::daemon::DaemonHandle;

/// The node record's lease: it is gone this long after the node stops renewing it.
pub const LEASE_TTL_SECS: i64 = 5;
/// How often the record is refreshed (health changes) and the lease renewed.
pub const RECORD_PERIOD: Duration = Duration::from_millis(1000);
/// Pause between attempts to reach etcd.
const RETRY: Duration = Duration::from_millis(500);

/// The follower's inputs.
pub struct Follower {
    pub settings: FleetSettings,
    pub daemon: DaemonHandle,
    pub view: SharedView,
    /// Where the last applied state is saved, so a restart without etcd serves it.
    pub saved: Option<PathBuf>,
    /// What the maps hold now (the saved state the daemon started with, or empty).
    pub applied: Snapshot,
}

/// A daemon starting with `[fleet]`: its configuration composed with the state saved by the
/// last run (or none: no VIPs until etcd answers), never waiting for etcd; and the follower
/// to start once the daemon runs. Without `[fleet]`, everything as it was.
pub fn starting(
    config: crate::config::Config,
    mut options: crate::daemon::Options,
) -> (crate::config::Config, crate::daemon::Options, Option<impl FnOnce(DaemonHandle) -> Follower>) {
    let Some(settings) = config.fleet.clone() else { return (config, options, None) };
    let saved = options.ids_file.as_ref().map(|p| p.with_file_name("fleet.json"));
    let mut snapshot = saved.as_deref().and_then(load_saved).unwrap_or_default();
    let composed = match snapshot.compose(&config.source) {
        Ok((composed, _)) => composed,
        Err(problems) => {
            tracing::error!(
                "fleet: the saved state is refused, starting with no VIPs until etcd answers: {}",
                problems.join("; ")
            );
            snapshot = Snapshot::default();
            match snapshot.compose(&config.source) {
                Ok((composed, _)) => composed,
                Err(_) => crate::config::Config { vips: Vec::new(), ..config.clone() },
            }
        }
    };
    if !config.vips.is_empty() {
        tracing::info!(
            vips = config.vips.len(),
            "fleet: this file's [[vip]] tables are not served: the VIPs are the fleet's (`lb-ctl fleet push` writes a file's)"
        );
    }
    tracing::info!(revision = snapshot.revision, prefix = %settings.prefix, node = %settings.node, "fleet: starting with the saved state; following etcd");
    let view: SharedView = Default::default();
    {
        let mut v = view.lock().unwrap();
        v.node = settings.node.clone();
        v.prefix = settings.prefix.clone();
        v.applied_revision = snapshot.revision;
    }
    options.fleet = Some((snapshot.clone(), view.clone()));
    let follower = move |daemon| Follower { settings, daemon, view, saved, applied: snapshot };
    (composed, options, Some(follower))
}

/// The state saved by the last run, if any (unreadable: none, with a warning).
pub fn load_saved(path: &std::path::Path) -> Option<Snapshot> {
    let text = std::fs::read_to_string(path).ok()?;
    match serde_json::from_str(&text) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the saved fleet state is unreadable; starting without it");
            None
        }
    }
}

impl Follower {
    /// Follows the fleet until the daemon stops.
    pub async fn run(mut self) {
        let mut current = self.applied.clone();
        loop {
            let error = match self.session(&mut current).await {
                Ok(()) => continue, // the watch asked for a full read (compaction)
                Err(e) => e,
            };
            // The next session (and the next backend change) connects again.
            Store::forget(&self.settings);
            if self.daemon.is_stopped() {
                return;
            }
            {
                let mut view = self.view.lock().unwrap();
                if view.connected || view.error.is_none() {
                    view.disconnects_total += u64::from(view.connected);
                    tracing::warn!(
                        error = %error,
                        applied_revision = self.applied.revision,
                        "fleet: etcd lost; keeping the last applied state and forwarding with it, retrying"
                    );
                }
                view.connected = false;
                view.error = Some(error.to_string());
            }
            tokio::time::sleep(RETRY).await;
        }
    }

    /// One connection: full read, apply, watch until an error.
    async fn session(&mut self, current: &mut Snapshot) -> Result<(), StoreError> {
        let mut store = Store::shared(&self.settings).await?;
        *current = store.read().await?;
        {
            let mut view = self.view.lock().unwrap();
            if !view.connected {
                tracing::info!(revision = current.revision, "fleet: etcd reached; reading the whole state");
            }
            view.connected = true;
            view.error = None;
        }
        self.apply(current).await;
        let mut client = store.client();
        // The record and the lease have their own task: a change is never held up behind a
        // record being written (its end ends the session, as a watch error does).
        let recorder =
            Recorder { settings: self.settings.clone(), daemon: self.daemon.clone(), view: self.view.clone() };
        let mut recording = tokio::spawn(recorder.run(store.clone()));
        let _stop = AbortOnDrop(recording.abort_handle());
        let options = WatchOptions::new().with_prefix().with_start_revision(current.revision + 1);
        let mut watch = client.watch(store.key(STATE), Some(options)).await.map_err(|e| etcd(&self.settings, e))?;
        loop {
            tokio::select! {
                message = watch.message() => {
                    let Some(answer) = message.map_err(|e| etcd(&self.settings, e))? else {
                        return Err(StoreError::Value("the watch ended".into()));
                    };
                    if answer.compact_revision() > 0 || answer.canceled() {
                        tracing::warn!(compacted = answer.compact_revision(), "fleet: watch cancelled (history compacted?): reading the whole state");
                        return Ok(());
                    }
                    if answer.events().is_empty() {
                        continue;
                    }
                    for event in answer.events() {
                        let Some(kv) = event.kv() else { continue };
                        let Some(key) = kv.key_str().ok().and_then(|k| store.relative(k)) else { continue };
                        if key == GENERATION {
                            current.generation = kv.mod_revision();
                            continue;
                        }
                        match event.event_type() {
                            EventType::Put => {
                                let value = String::from_utf8(kv.value().to_vec()).unwrap_or_else(|_| "\u{0}not UTF-8".into());
                                current.values.insert(key.to_string(), value);
                            }
                            EventType::Delete => {
                                current.values.remove(key);
                            }
                        }
                        current.revision = current.revision.max(kv.mod_revision());
                    }
                    self.apply(current).await;
                }
                ended = &mut recording => {
                    return Err(match ended {
                        Ok(Err(e)) => e,
                        _ => StoreError::Value("the node's record task ended".into()),
                    });
                }
            }
        }
    }

    /// Applies `current` unless the maps hold it already; a refused state changes nothing.
    async fn apply(&mut self, current: &Snapshot) {
        if current.values == self.applied.values {
            self.applied.revision = current.revision;
            self.applied.generation = current.generation;
            self.view.lock().unwrap().applied_revision = current.revision;
            return;
        }
        match self.daemon.apply_fleet(current.clone()).await {
            Ok(message) => {
                tracing::info!(revision = current.revision, "fleet: applied: {message}");
                self.applied = current.clone();
                let mut view = self.view.lock().unwrap();
                view.applied_revision = current.revision;
                view.applied_total += 1;
                view.refused = None;
                drop(view);
                self.save();
            }
            Err(message) => {
                tracing::error!(
                    revision = current.revision,
                    kept_revision = self.applied.revision,
                    "fleet: state refused, nothing changed (the last good state stays): {message}"
                );
                let mut view = self.view.lock().unwrap();
                view.refused = Some(format!("revision {}: {message}", current.revision));
                view.refused_total += 1;
            }
        }
    }

    fn save(&self) {
        let Some(path) = &self.saved else { return };
        let text = serde_json::to_string(&self.applied).expect("a snapshot serializes");
        let tmp = path.with_extension("tmp");
        if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path)) {
            tracing::warn!(path = %path.display(), error = %e, "fleet: could not save the applied state");
        }
    }
}

/// Keeps the node's lease and record: every [`RECORD_PERIOD`], the lease renewed (an etcd
/// that does not answer within [`REQUEST_TIMEOUT`] counts as lost), the record written when
/// it changed, and the rings compared with the other nodes'.
struct Recorder {
    settings: FleetSettings,
    daemon: DaemonHandle,
    view: SharedView,
}

/// Aborts a task when dropped (a session that ends takes its recorder with it).
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Recorder {
    async fn run(self, mut store: Store) -> Result<(), StoreError> {
        let mut client = store.client();
        let lease = client.lease_grant(LEASE_TTL_SECS, None).await.map_err(|e| etcd(&self.settings, e))?.id();
        let (mut keeper, mut renewals) = client.lease_keep_alive(lease).await.map_err(|e| etcd(&self.settings, e))?;
        let mut ticks = tokio::time::interval(RECORD_PERIOD);
        let mut last_record = String::new();
        loop {
            ticks.tick().await;
            keeper.keep_alive().await.map_err(|e| etcd(&self.settings, e))?;
            match tokio::time::timeout(REQUEST_TIMEOUT, renewals.message()).await {
                Ok(Ok(Some(r))) if r.ttl() > 0 => {}
                Ok(Err(e)) => return Err(etcd(&self.settings, e)),
                Err(_) => {
                    return Err(StoreError::Value(format!(
                        "etcd did not renew the node's lease within {REQUEST_TIMEOUT:?}"
                    )));
                }
                Ok(_) => return Err(StoreError::Value("the node's lease expired".into())),
            }
            let record = self.record().await;
            if record != last_record {
                store.put_node(&self.settings.node, &record, lease).await?;
                last_record = record;
            }
            self.compare_rings(&mut store).await?;
        }
    }

    /// Whether this node's rings differ from most nodes' (metric, status).
    async fn compare_rings(&self, store: &mut Store) -> Result<(), StoreError> {
        let records: Vec<NodeRecord> =
            store.nodes().await?.values().filter_map(|text| serde_json::from_str(text).ok()).collect();
        let status = super::record::compare(current_generation(&records), records);
        let mine = status.nodes.iter().find(|n| n.record.name == self.settings.node);
        let differ = mine.is_some_and(|n| !n.rings_agree);
        let mut view = self.view.lock().unwrap();
        if differ && !view.rings_differ {
            tracing::warn!("fleet: this node's rings differ from most nodes' (`lb-ctl fleet status` says which)");
        }
        view.rings_differ = differ;
        Ok(())
    }

    /// This node's record, as JSON.
    async fn record(&self) -> String {
        // One lock, released at once (the writer's `status` takes it too).
        let view = self.view.lock().unwrap().clone();
        let mut record = NodeRecord {
            name: self.settings.node.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            applied_revision: view.applied_revision,
            refused: view.refused,
            ..Default::default()
        };
        let vips = match self.daemon.call(Request::Vips).await {
            Ok(Response::Vips(vips)) => vips,
            _ => Vec::new(),
        };
        for v in &vips {
            if let Some(d) = &v.ring_digest {
                record.rings.insert(label_of(v), d.clone());
            }
        }
        if let Ok(Response::Backends(backends)) = self.daemon.call(Request::Backends { vip: None }).await {
            for b in backends {
                // A backend's VIP is named by its label (its name, or ADDR:PORT/PROTOCOL).
                let Some(v) = vips.iter().find(|v| v.name.as_deref() == Some(&b.vip) || label_of(v) == b.vip) else {
                    continue;
                };
                record.backends.push(BackendRecord {
                    vip: label_of(v),
                    address: b.address,
                    health: b.health.as_str().into(),
                    state: b.state,
                });
            }
        }
        if let Ok(Response::Status(status)) = self.daemon.call(Request::Status).await {
            record.node_drained = status.node_drained;
        }
        serde_json::to_string(&record).expect("a record serializes")
    }
}

/// A VIP's `ADDR:PORT/PROTOCOL`, as its fleet key names it.
fn label_of(v: &crate::api::types::VipView) -> String {
    format!("{}/{}", std::net::SocketAddr::new(v.address, v.port), v.protocol)
}

fn etcd(settings: &FleetSettings, source: etcd_client::Error) -> StoreError {
    StoreError::Etcd { endpoints: settings.endpoints.join(","), source }
}

/// The newest revision any node applied (for a comparison of rings only).
fn current_generation(records: &[NodeRecord]) -> i64 {
    records.iter().map(|r| r.applied_revision).max().unwrap_or(0)
}
