//! The daemon: one writer owns the data plane and the desired state, and handles every change
//! — API calls, reloads, health transitions — one message at a time, in arrival order.
//!
//! The writer runs on a blocking thread of the tokio runtime (map syscalls and Maglev builds
//! block) and receives [`Command`]s on one channel; the API server and the health checkers
//! only send messages. Every change is made on a copy of the state, applied as a map
//! difference, and kept only if the data plane accepted it.
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use lb_common::backend::BACKEND_NONE;
use lb_common::flow::FlowKey;
use lb_common::hash::{client_hash, flow_hash};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, oneshot};

use crate::api::ApiError;
use crate::api::types::{
    BackendRequest, BackendView, Changed, CounterView, Decision, ExplainRequest, ExplainView, ReloadView,
    StatsView, StatusView, TrafficView, VipView,
};
use crate::config::{Config, HashMode};
use crate::dataplane::{Dataplane, DataplaneError};
use crate::health::{self, Checkers};
use crate::proxy::ProxyRuntime;
use crate::state::maps::{Applier, ApplyReport, MapContents, ip_bytes, ring_input};
use crate::state::{IdSnapshot, State, StateError, VipState};

/// A request to the writer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Status,
    Vips,
    /// Backends of one VIP, or of all.
    Backends {
        vip: Option<String>,
    },
    Add(BackendRequest),
    Remove(BackendRequest),
    Drain(BackendRequest),
    Stats,
    Explain(ExplainRequest),
    Reload,
}

/// The writer's answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    Status(StatusView),
    Vips(Vec<VipView>),
    Backends(Vec<BackendView>),
    Changed(Changed),
    Stats(StatsView),
    Explain(ExplainView),
    Reloaded(ReloadView),
}

impl Response {
    /// The JSON body of the answer.
    pub fn to_json(&self) -> serde_json::Value {
        let value = match self {
            Response::Status(v) => serde_json::to_value(v),
            Response::Vips(v) => serde_json::to_value(v),
            Response::Backends(v) => serde_json::to_value(v),
            Response::Changed(v) => serde_json::to_value(v),
            Response::Stats(v) => serde_json::to_value(v),
            Response::Explain(v) => serde_json::to_value(v),
            Response::Reloaded(v) => serde_json::to_value(v),
        };
        value.expect("API views serialize to JSON")
    }
}

enum Command {
    Call(Request, oneshot::Sender<Result<Response, ApiError>>),
    Health(health::Event),
    /// Time to start a new next-hop cache generation (every `nexthop_ttl`).
    RefreshNextHops,
    Stop,
}

/// A failure to start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration does not fit the ids available.
    #[error(transparent)]
    State(#[from] StateError),
    /// Writing the initial map contents failed.
    #[error("writing the maps: {0}")]
    Dataplane(#[from] DataplaneError),
}

/// How to reach the writer; cheap to clone.
#[derive(Clone)]
pub struct DaemonHandle {
    tx: mpsc::UnboundedSender<Command>,
}

impl DaemonHandle {
    /// Sends `request` to the writer and waits for its answer.
    pub async fn call(&self, request: Request) -> Result<Response, ApiError> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Command::Call(request, reply))
            .map_err(|_| ApiError::internal("the daemon is stopping"))?;
        answer.await.map_err(|_| ApiError::internal("the daemon is stopping"))?
    }
}

/// Settings that do not come from lb.toml.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The interface served (shown in the status).
    pub interface: String,
    /// How the program is attached (`native`, `skb`), shown in the status.
    pub xdp_mode: Option<String>,
    /// Where to keep the ids of VIPs and backends across restarts (next to the pinned maps);
    /// `None` keeps them in memory only.
    pub ids_file: Option<PathBuf>,
}

/// A started daemon: its writer is running.
pub struct Daemon {
    handle: DaemonHandle,
    writer: Option<tokio::task::JoinHandle<Box<dyn Dataplane>>>,
}

impl Daemon {
    /// Builds the state of `config`, writes it to `dataplane`, starts the health checkers and
    /// the writer. Must be called from within a tokio runtime.
    pub fn start(
        config: Config,
        mut dataplane: Box<dyn Dataplane>,
        options: Options,
    ) -> Result<Daemon, DaemonError> {
        let previous = options.ids_file.as_deref().and_then(load_ids);
        let (skeleton, mut applier) = match &previous {
            Some(ids) => {
                let skeleton = State::from_id_snapshot(ids);
                let applier = Applier::assuming(MapContents::of(&skeleton));
                (skeleton, applier)
            }
            None => (State::default(), Applier::default()),
        };
        let state = State::from_config(&config, &skeleton)?;
        let report = applier.apply(&mut *dataplane, &MapContents::of(&state))?;
        tracing::info!(
            vips = state.vips.len(),
            backends = state.vips.iter().map(|v| v.backends.len()).sum::<usize>(),
            reused_ids = previous.is_some(),
            changes = %describe(&report),
            "maps written"
        );
        let (tx, rx) = mpsc::unbounded_channel();
        let sink_tx = tx.clone();
        let sink: health::Sink = Arc::new(move |event| {
            let _ = sink_tx.send(Command::Health(event));
        });
        if config.daemon.nexthop_ttl_ms > 0 {
            let period = std::time::Duration::from_millis(config.daemon.nexthop_ttl_ms as u64);
            let tick_tx = tx.clone();
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(period);
                ticks.tick().await;
                loop {
                    ticks.tick().await;
                    if tick_tx.send(Command::RefreshNextHops).is_err() {
                        break; // the writer has stopped
                    }
                }
            });
        }
        let mut checkers = Checkers::new(tokio::runtime::Handle::current(), sink);
        checkers.sync(&state);
        let mut writer = Writer {
            dp: dataplane,
            state,
            applier,
            checkers,
            config,
            options,
            started: Instant::now(),
            last_reload: None,
            saved_ids: None,
            proxy: None,
            runtime: tokio::runtime::Handle::current(),
        };
        writer.save_ids();
        let writer = tokio::task::spawn_blocking(move || writer.run(rx));
        Ok(Daemon { handle: DaemonHandle { tx }, writer: Some(writer) })
    }

    pub fn handle(&self) -> DaemonHandle {
        self.handle.clone()
    }

    /// Stops the health checkers and the writer (after the messages already sent), and gives
    /// back the data plane. The maps keep their contents: traffic keeps flowing.
    pub async fn stop(mut self) -> Box<dyn Dataplane> {
        let _ = self.handle.tx.send(Command::Stop);
        let writer = self.writer.take().expect("a daemon is stopped once");
        writer.await.expect("the writer does not panic")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.handle.tx.send(Command::Stop);
    }
}

/// Runs the daemon until `shutdown` resolves: writer, health checkers, and the control API on
/// `unix` (and `tcp` if configured). Returns the data plane after a clean stop.
pub async fn run(
    config: Config,
    dataplane: Box<dyn Dataplane>,
    options: Options,
    unix: UnixListener,
    tcp: Option<TcpListener>,
    shutdown: impl Future<Output = ()>,
) -> Result<Box<dyn Dataplane>, DaemonError> {
    let daemon = Daemon::start(config, dataplane, options)?;
    crate::api::server::serve(daemon.handle(), unix, tcp, shutdown).await;
    Ok(daemon.stop().await)
}

fn load_ids(path: &Path) -> Option<IdSnapshot> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the saved ids; ids start afresh");
            return None;
        }
    };
    match serde_json::from_str(&text) {
        Ok(ids) => Some(ids),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "saved ids are unreadable; ids start afresh");
            None
        }
    }
}

/// A map apply report in words.
pub fn describe(r: &ApplyReport) -> String {
    if r.is_empty() {
        return "no change".into();
    }
    let parts = [
        (r.config, "config"),
        (r.vips_upserted, "VIPs written"),
        (r.vips_removed, "VIPs removed"),
        (r.backends_upserted, "backends written"),
        (r.backends_removed, "backends removed"),
        (r.rings_written, "rings written"),
        (r.port_flags, "port flags"),
    ];
    parts.iter().filter(|(n, _)| *n > 0).map(|(n, what)| format!("{n} {what}")).collect::<Vec<_>>().join(", ")
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

struct Writer {
    dp: Box<dyn Dataplane>,
    state: State,
    applier: Applier,
    checkers: Checkers,
    /// The configuration in force (the last one loaded without mistakes).
    config: Config,
    options: Options,
    started: Instant,
    last_reload: Option<ReloadView>,
    saved_ids: Option<IdSnapshot>,
    /// The userspace proxy for proxy VIPs, started with the first of them.
    proxy: Option<ProxyRuntime>,
    runtime: tokio::runtime::Handle,
}

impl Writer {
    /// Brings the in-process proxy in line with `state` (starting it with the first proxy VIP).
    fn sync_proxy(&mut self, state: &State) -> Result<(), ApiError> {
        if self.proxy.is_none() {
            if state.vips.iter().all(|v| v.forwarding.is_xdp()) {
                return Ok(());
            }
            self.proxy = Some(ProxyRuntime::new(self.runtime.clone()).map_err(ApiError::internal)?);
        }
        let proxy = self.proxy.as_mut().expect("started above");
        proxy.sync(state).map_err(|e| ApiError::internal(format!("proxy: {e}")))
    }

    fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) -> Box<dyn Dataplane> {
        let state = self.state.clone();
        if let Err(e) = self.sync_proxy(&state) {
            tracing::error!(error = %e, "the proxy VIPs could not start");
        }
        while let Some(command) = rx.blocking_recv() {
            match command {
                Command::Call(request, reply) => {
                    let answer = self.handle(request);
                    let _ = reply.send(answer);
                }
                Command::Health(event) => self.on_health(event),
                Command::RefreshNextHops => {
                    if let Err(e) = self.dp.refresh_next_hops() {
                        tracing::warn!(error = %e, "could not start a new next-hop cache generation");
                    }
                }
                Command::Stop => break,
            }
        }
        self.checkers.stop();
        if let Some(proxy) = &self.proxy {
            proxy.shutdown(std::time::Duration::from_secs(5));
        }
        self.dp
    }

    fn handle(&mut self, request: Request) -> Result<Response, ApiError> {
        match request {
            Request::Status => Ok(Response::Status(self.status())),
            Request::Vips => self.vips().map(Response::Vips),
            Request::Backends { vip } => self.backends(vip.as_deref()).map(Response::Backends),
            Request::Add(r) => {
                self.change("added", |s| s.add_backend(&r.vip, &r.address, r.weight)).map(Response::Changed)
            }
            Request::Remove(r) => {
                self.change("removed", |s| s.remove_backend(&r.vip, &r.address)).map(Response::Changed)
            }
            Request::Drain(r) => self
                .change("draining: no new flows, established ones stay", |s| {
                    s.drain_backend(&r.vip, &r.address)
                })
                .map(Response::Changed),
            Request::Stats => self.stats().map(Response::Stats),
            Request::Explain(r) => self.explain(&r).map(Response::Explain),
            Request::Reload => {
                let view = self.reload();
                if !view.ok {
                    return Err(ApiError::bad_request(view.message));
                }
                Ok(Response::Reloaded(view))
            }
        }
    }

    /// Makes `next` the state: applies its map difference, or, if the data plane refuses,
    /// puts the maps back to the current state and keeps it.
    fn commit(&mut self, next: State) -> Result<ApplyReport, ApiError> {
        match self.applier.apply(&mut *self.dp, &MapContents::of(&next)) {
            Ok(report) => {
                if let Err(e) = self.sync_proxy(&next) {
                    tracing::error!(error = %e, "proxy update failed; restoring the previous state");
                    let previous = self.state.clone();
                    if let Err(e2) = self.applier.apply(&mut *self.dp, &MapContents::of(&previous)) {
                        tracing::error!(error = %e2, "restoring the previous map contents failed too");
                    }
                    let _ = self.sync_proxy(&previous);
                    return Err(e);
                }
                self.state = next;
                self.checkers.sync(&self.state);
                self.save_ids();
                Ok(report)
            }
            Err(e) => {
                tracing::error!(error = %e, "map update failed; restoring the previous state");
                if let Err(e2) = self.applier.apply(&mut *self.dp, &MapContents::of(&self.state)) {
                    tracing::error!(error = %e2, "restoring the previous map contents failed too");
                }
                Err(e.into())
            }
        }
    }

    /// An API change: made on a copy of the state; refused changes leave everything as it was.
    fn change(
        &mut self,
        done: &str,
        f: impl FnOnce(&mut State) -> Result<u32, StateError>,
    ) -> Result<Changed, ApiError> {
        let mut next = self.state.clone();
        let id = f(&mut next)?;
        let (vip, backend) = match self.state.backend_by_id(id).or_else(|| next.backend_by_id(id)) {
            Some((v, b)) => (v.label(), b.address),
            None => return Err(ApiError::internal("backend vanished")),
        };
        let report = self.commit(next)?;
        let message = format!("{vip}: backend {backend} {done}");
        tracing::info!(vip = %vip, backend = %backend, via = "api", changes = %describe(&report), "{message}");
        Ok(Changed { vip, backend, backend_id: id, message })
    }

    fn on_health(&mut self, event: health::Event) {
        if !self.checkers.is_current(&event) {
            return;
        }
        let mut next = self.state.clone();
        if !next.set_health(event.backend_id, event.health) {
            return;
        }
        match self.commit(next) {
            Ok(report) => {
                tracing::debug!(backend_id = event.backend_id, changes = %describe(&report), "health applied")
            }
            Err(e) => {
                tracing::error!(backend_id = event.backend_id, error = %e, "health transition not applied")
            }
        }
    }

    fn reload(&mut self) -> ReloadView {
        let result = self.try_reload();
        let view = match result {
            Ok(message) => {
                tracing::info!(config = %self.config.source.display(), "reloaded: {message}");
                ReloadView { at_unix: unix_now(), ok: true, message }
            }
            Err(message) => {
                tracing::error!(config = %self.config.source.display(), "reload refused, nothing changed: {message}");
                ReloadView {
                    at_unix: unix_now(),
                    ok: false,
                    message: format!("reload refused, nothing changed:\n{message}"),
                }
            }
        };
        self.last_reload = Some(view.clone());
        view
    }

    fn try_reload(&mut self) -> Result<String, String> {
        let config = Config::load(&self.config.source).map_err(|e| e.to_string())?;
        let (old, new) = (&self.config.daemon, &config.daemon);
        let fixed = [
            ("ring_size", old.ring_size.to_string(), new.ring_size.to_string()),
            ("flow_table_size", old.flow_table_size.to_string(), new.flow_table_size.to_string()),
            ("api_socket", format!("{:?}", old.api_socket), format!("{:?}", new.api_socket)),
            ("api_tcp", format!("{:?}", old.api_tcp), format!("{:?}", new.api_tcp)),
        ];
        let changed: Vec<String> = fixed
            .iter()
            .filter(|(_, a, b)| a != b)
            .map(|(key, a, b)| {
                format!(
                    "{}: daemon.{key} cannot change without a restart (running {a}, file {b})",
                    config.source.display()
                )
            })
            .collect();
        if !changed.is_empty() {
            return Err(changed.join("\n"));
        }
        let next = State::from_config(&config, &self.state).map_err(|e| e.to_string())?;
        let report = self.commit(next).map_err(|e| e.message)?;
        self.config = config;
        // Proxy VIPs are not in the maps: their changes are reported by the proxy runtime.
        let proxy_changes = self.proxy.as_ref().map(|p| p.last_changes().join(", ")).unwrap_or_default();
        Ok(match (report.is_empty(), proxy_changes.is_empty()) {
            (_, true) => describe(&report),
            (true, false) => proxy_changes,
            (false, false) => format!("{}, {proxy_changes}", describe(&report)),
        })
    }

    fn save_ids(&mut self) {
        let Some(path) = &self.options.ids_file else { return };
        let ids = self.state.id_snapshot();
        if self.saved_ids.as_ref() == Some(&ids) {
            return;
        }
        let tmp = path.with_extension("tmp");
        let result = serde_json::to_vec(&ids)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, path));
        match result {
            Ok(()) => self.saved_ids = Some(ids),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot save the ids; a restart may re-place flows")
            }
        }
    }

    fn status(&self) -> StatusView {
        let backends = || self.state.vips.iter().flat_map(|v| v.backends.iter());
        StatusView {
            version: env!("CARGO_PKG_VERSION").into(),
            interface: self.options.interface.clone(),
            xdp_mode: self.options.xdp_mode.clone(),
            config: self.config.source.display().to_string(),
            uptime_secs: self.started.elapsed().as_secs(),
            vips: self.state.vips.len(),
            backends: backends().count(),
            backends_up: backends().filter(|b| b.health.is_usable()).count(),
            backends_down: backends().filter(|b| !b.health.is_usable()).count(),
            backends_draining: backends().filter(|b| b.effective_weight() == 0).count(),
            health_checkers: self.checkers.len(),
            ring_size: self.state.ring_size,
            last_reload: self.last_reload.clone(),
        }
    }

    fn vips(&self) -> Result<Vec<VipView>, ApiError> {
        self.state
            .vips
            .iter()
            .map(|v| {
                let traffic =
                    if v.forwarding.is_xdp() { self.dp.vip_traffic(v.id)? } else { Default::default() };
                Ok(VipView {
                    id: v.id,
                    name: v.name.clone(),
                    address: v.address,
                    port: v.port,
                    protocol: v.protocol.as_str().into(),
                    forwarding: v.forwarding.as_str().into(),
                    hash: v.hash.as_str().into(),
                    all_down_policy: v.all_down.as_str().into(),
                    all_down: crate::state::maps::all_down(v),
                    backends: v.backends.len(),
                    healthy: v
                        .backends
                        .iter()
                        .filter(|b| b.health.is_usable() && b.effective_weight() > 0)
                        .count(),
                    packets: traffic.packets,
                    bytes: traffic.bytes,
                })
            })
            .collect()
    }

    fn backends(&self, vip: Option<&str>) -> Result<Vec<BackendView>, ApiError> {
        let vips: Vec<&VipState> = match vip {
            Some(r) => vec![self.state.find_vip(r)?],
            None => self.state.vips.iter().collect(),
        };
        let flows = self.dp.flows_per_backend()?;
        let proxy_stats = self.proxy.as_ref().map(|p| p.handle().stats()).unwrap_or_default();
        let mut out = Vec::new();
        for v in vips {
            let ring = ring_input(v);
            let label = v.label();
            let proxied = proxy_stats.iter().find(|s| s.name == label);
            for b in &v.backends {
                let traffic =
                    if v.forwarding.is_xdp() { self.dp.backend_traffic(b.id)? } else { Default::default() };
                let by_proxy = proxied.and_then(|s| s.backends.iter().find(|pb| pb.addr == b.address));
                out.push(BackendView {
                    vip: v.label(),
                    id: b.id,
                    address: b.address,
                    weight: b.weight,
                    health: b.health,
                    state: b.admin_state().into(),
                    origin: b.origin,
                    in_ring: ring.members.iter().any(|(id, w, _)| *id == b.id && *w > 0),
                    packets: traffic.packets,
                    bytes: traffic.bytes,
                    active_flows: match by_proxy {
                        Some(pb) => pb.active,
                        None => flows.get(&b.id).copied().unwrap_or(0),
                    },
                    requests: by_proxy.map(|pb| pb.requests),
                    errors: by_proxy.map(|pb| pb.errors),
                });
            }
        }
        Ok(out)
    }

    fn stats(&self) -> Result<StatsView, ApiError> {
        let counters = self
            .dp
            .counters()?
            .into_iter()
            .map(|(c, value)| CounterView { name: c.name().into(), value })
            .collect();
        let mut vips = Vec::new();
        let mut backends = Vec::new();
        for v in self.state.vips.iter().filter(|v| v.forwarding.is_xdp()) {
            let t = self.dp.vip_traffic(v.id)?;
            vips.push(TrafficView { name: v.label(), packets: t.packets, bytes: t.bytes });
            for b in &v.backends {
                let t = self.dp.backend_traffic(b.id)?;
                backends.push(TrafficView {
                    name: format!("{} {}", v.label(), b.address),
                    packets: t.packets,
                    bytes: t.bytes,
                });
            }
        }
        Ok(StatsView { counters, vips, backends })
    }

    /// Which backend a flow from `client` to the VIP gets, computed the way the XDP program
    /// does: the connection table first, then ring slot `hash % ring_size`.
    fn explain(&self, r: &ExplainRequest) -> Result<ExplainView, ApiError> {
        let v = self.state.find_vip(&r.vip)?;
        if !v.forwarding.is_xdp() {
            return Err(ApiError::bad_request(format!(
                "VIP {:?} is served by the userspace proxy; explain covers XDP VIPs",
                v.label()
            )));
        }
        let (ip, port) = match r.client.parse::<std::net::SocketAddr>() {
            Ok(sa) => (sa.ip(), Some(sa.port())),
            Err(_) => match r.client.parse::<IpAddr>() {
                Ok(ip) => (ip, None),
                Err(_) => {
                    return Err(ApiError::bad_request(format!(
                        "malformed client address {:?}: expected ADDR or ADDR:PORT",
                        r.client
                    )));
                }
            },
        };
        if ip.is_ipv4() != v.address.is_ipv4() {
            return Err(ApiError::bad_request(format!(
                "client {ip} and VIP {} are not of the same family",
                v.address
            )));
        }
        let (src, family) = ip_bytes(ip);
        let (dst, _) = ip_bytes(v.address);
        let protocol = v.protocol.ip_proto();
        let ring_size = self.state.ring_size;
        let mut view = ExplainView {
            vip: v.label(),
            client: r.client.clone(),
            decision: Decision::Ring,
            backend: None,
            backend_id: None,
            hash: None,
            slot: None,
            ring_size,
            reason: String::new(),
        };
        let mut notes = Vec::new();
        if let Some(port) = port {
            let key = FlowKey {
                src,
                dst,
                src_port: port.to_be(),
                dst_port: v.port.to_be(),
                protocol,
                family,
                _pad: [0; 2],
            };
            match self.dp.lookup_flow(&key)? {
                Some(entry) => match v.backends.iter().find(|b| b.id == entry.backend_id) {
                    Some(b) => {
                        view.decision = Decision::Conntrack;
                        view.backend = Some(b.address);
                        view.backend_id = Some(b.id);
                        view.reason = format!(
                            "connection-table hit: this flow is pinned to backend {} (id {}){}",
                            b.address,
                            b.id,
                            if b.effective_weight() == 0 { ", which is draining" } else { "" }
                        );
                        return Ok(view);
                    }
                    None => notes.push(format!(
                        "the connection-table entry names backend id {}, which was removed: the flow is placed again",
                        entry.backend_id
                    )),
                },
                None => notes.push("not in the connection table: a new flow".to_string()),
            }
        }
        let seed = self.state.hash_seed;
        let hash = match (v.hash, port) {
            (HashMode::Ip, _) => client_hash(&src, seed),
            (HashMode::Flow, Some(port)) => {
                flow_hash(&src, &dst, port.to_be(), v.port.to_be(), protocol, seed)
            }
            (HashMode::Flow, None) => {
                return Err(ApiError::bad_request(format!(
                    "VIP {:?} hashes the 5-tuple (hash = \"flow\"): give the client as ADDR:PORT",
                    v.label()
                )));
            }
        };
        let slot = hash % ring_size;
        let id = self.dp.ring_slot(v.id, slot)?;
        view.hash = Some(hash);
        view.slot = Some(slot);
        let what = match v.hash {
            HashMode::Ip => "hash of the client address",
            HashMode::Flow => "hash of the 5-tuple",
        };
        if id == BACKEND_NONE {
            notes.push(format!("ring slot {slot} of {ring_size} ({what} {hash:#010x}) is empty: no usable backend, the packet is dropped"));
        } else {
            let b = v.backends.iter().find(|b| b.id == id);
            view.backend_id = Some(id);
            view.backend = b.map(|b| b.address);
            let name = b.map_or(format!("id {id}"), |b| format!("{} (id {id})", b.address));
            let mut why =
                format!("ring slot {slot} of {ring_size} ({what} {hash:#010x}) holds backend {name}");
            if crate::state::maps::all_down(v) {
                why.push_str(&format!(
                    "; no backend is healthy, the VIP fails {}",
                    match v.all_down {
                        crate::config::AllDownPolicy::Forward => "open",
                        crate::config::AllDownPolicy::Drop => "closed",
                    }
                ));
            }
            notes.push(why);
        }
        view.reason = notes.join("; ");
        Ok(view)
    }
}
