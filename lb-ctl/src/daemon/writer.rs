//! The writer: the one task that owns the data plane and the desired state. Every change (API
//! calls, reloads, health transitions) is made on a copy of the state, applied as a map
//! difference, and kept only if the data plane accepted it.
use std::collections::HashMap;
use std::time::Instant;

use tokio::sync::{mpsc, watch};

use super::resolver::{Answer, Plan};
use super::{Command, DaemonError, Options, describe, unix_now};
use crate::announce::{self, KernelRoutes, MemoryRoutes, Routes};
use crate::api::types::{Changed, NodeView, ReloadView};
use crate::api::{ApiError, Request, Response};
use crate::cluster::wire::WireFlow;
use crate::cluster::{Counters, IdBook};
use crate::config::Forwarding;
use crate::config::{Config, ConfigError, hosts};
use crate::dataplane::Dataplane;
use crate::health::{self, Checkers};
use crate::proxy::ProxyRuntime;
use crate::state::plan::{Applier, ApplyReport, MapContents};
use crate::state::{HealthChange, SavedState, State, StateError};
use lb_common::flow::{FlowKey, SharedFlow};
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
enum ReloadError {
    /// The file has mistakes.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The file changes settings that hold for the life of the maps.
    #[error("{}", .0.join("\n"))]
    Fixed(Vec<String>),
    /// The new state does not fit (ids, ring).
    #[error(transparent)]
    State(#[from] StateError),
    /// The data plane or the proxy refused it.
    #[error(transparent)]
    Apply(#[from] ApiError),
    /// The fleet's state (with the file) cannot be used.
    #[error("{}", .0.join("\n"))]
    Fleet(Vec<String>),
}

pub(super) struct Writer {
    pub(super) dp: Box<dyn Dataplane>,
    pub(super) state: State,
    pub(super) applier: Applier,
    pub(super) checkers: Checkers,
    /// The configuration in force (the last one loaded without mistakes).
    pub(super) config: Config,
    pub(super) options: Options,
    pub(super) started: Instant,
    pub(super) last_reload: Option<ReloadView>,
    /// Reloads done and refused, for metrics.
    pub(super) reloads: (u64, u64),
    saved: Option<SavedState>,
    /// The userspace proxy for proxy VIPs, started with the first of them.
    pub(super) proxy: Option<ProxyRuntime>,
    /// The last health transition of each backend id since the daemon started.
    pub(super) transitions: HashMap<u32, health::Transition>,
    runtime: tokio::runtime::Handle,
    /// What the resolving task resolves (the configuration in force's host names).
    resolve_plan: watch::Sender<Plan>,
    /// The announced VIP routes; opened when the writer starts.
    routes: Box<dyn Routes>,
    /// Flow sharing (`[cluster]`): the ids as addresses for the sender, and its counters.
    pub(super) sharing: Option<(Arc<RwLock<IdBook>>, Arc<Counters>)>,
    /// How long each change's map writes took (`lb_map_write_duration_seconds`).
    pub(super) map_writes: prometheus_client::metrics::histogram::Histogram,
    /// The recent events (status page, `GET /v1/events`).
    pub(super) events: super::events::Events,
    /// Outlier ejections of each proxy backend (VIP label, address) seen so far, to record the
    /// new ones as events.
    ejections_seen: HashMap<(String, SocketAddr), u64>,
    /// Pins found removed and pinned again since the start, and the last time (unix).
    pub(super) pins_restored: (u64, Option<u64>),
    /// The program was found off the interface (its link detached) at the last check, and
    /// could not be attached again.
    pub(super) detached: bool,
    /// Times the program was found off the interface and attached again, and the last (unix).
    pub(super) attached_again: (u64, Option<u64>),
    /// `lb-ctl trace`: the filters in force and their traces.
    pub(super) traces: super::trace::Traces,
    /// `[fleet]`: the fleet state in force (reloads compose the file with it).
    pub(super) fleet: Option<crate::fleet::Snapshot>,
}

impl Writer {
    pub(super) fn new(
        dp: Box<dyn Dataplane>,
        state: State,
        applier: Applier,
        checkers: Checkers,
        config: Config,
        options: Options,
        resolve_plan: watch::Sender<Plan>,
    ) -> Writer {
        let fleet = options.fleet.as_ref().map(|(snapshot, _)| snapshot.clone());
        Writer {
            dp,
            state,
            applier,
            checkers,
            config,
            options,
            started: Instant::now(),
            last_reload: None,
            reloads: (0, 0),
            saved: None,
            proxy: None,
            transitions: HashMap::new(),
            runtime: tokio::runtime::Handle::current(),
            resolve_plan,
            routes: Box::new(MemoryRoutes::default()),
            sharing: None,
            // 10 µs to ~2.6 s: one slot is microseconds, a whole ring rebuild milliseconds.
            map_writes: prometheus_client::metrics::histogram::Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.00001, 4.0, 10),
            ),
            events: Default::default(),
            ejections_seen: HashMap::new(),
            pins_restored: (0, None),
            detached: false,
            attached_again: (0, None),
            traces: Default::default(),
            fleet,
        }
    }

    /// Brings the in-process proxy in line with `state` (starting it with the first proxy VIP).
    fn sync_proxy(&mut self, state: &State) -> Result<(), ApiError> {
        if self.proxy.is_none() {
            if state.vips.iter().all(|v| v.forwarding.is_xdp()) {
                return Ok(());
            }
            let proxy = ProxyRuntime::new(self.runtime.clone(), self.config.daemon.proxy_workers.map(|n| n as usize))
                .map_err(|e| ApiError::internal(format!("proxy: {e}")))?;
            self.proxy = Some(proxy);
        }
        let proxy = self.proxy.as_mut().expect("started above");
        proxy.sync(state).map_err(|e| ApiError::internal(format!("proxy: {e}")))
    }

    /// Serves `rx` until a stop. `started` says first whether the proxy VIPs could start
    /// (listen) and the maps be written; if not, the writer stops at once: a daemon missing
    /// VIPs must not run. The maps are written last, so a start that fails leaves them as it
    /// found them: a running balancer's pins keep forwarding as they did.
    pub(super) fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Command>,
        started: tokio::sync::oneshot::Sender<Result<(), DaemonError>>,
    ) -> Box<dyn Dataplane> {
        let state = self.state.clone();
        let opened = self.open_routes().map_err(DaemonError::Routes);
        let ready = opened
            .and_then(|()| self.sync_proxy(&state).map_err(|e| DaemonError::Proxy(e.to_string())))
            .and_then(|()| self.write_first());
        if let Err(e) = ready {
            self.checkers.stop();
            if let Some(proxy) = &mut self.proxy {
                proxy.shutdown(std::time::Duration::ZERO);
            }
            let _ = started.send(Err(e));
            return self.dp;
        }
        // Saved only now: a start that fails leaves the previous run's ids as they were.
        self.save_ids();
        let _ = started.send(Ok(()));
        for problem in self.not_adjacent() {
            tracing::warn!("{problem}");
            self.events.record("adjacency", None, None, problem);
        }
        self.sync_routes();
        while let Some(command) = rx.blocking_recv() {
            match command {
                Command::Call(request, reply) => {
                    self.note_ejections();
                    let answer = self.handle(request);
                    let _ = reply.send(answer);
                }
                Command::Health(event) => self.on_health(event),
                Command::CheckRoutes => {
                    self.note_ejections();
                    self.check_routes()
                }
                Command::Resolved(answer) => self.on_resolved(answer),
                Command::SharedFlows(flows) => self.on_shared_flows(&flows),
                Command::CheckPins => self.check_pins(),
                Command::Fleet(snapshot, reply) => {
                    let _ = reply.send(self.apply_fleet(*snapshot));
                }
                Command::RefreshNextHops => {
                    if let Err(e) = self.dp.refresh_next_hops() {
                        tracing::warn!(error = %e, "could not start a new next-hop cache generation");
                    }
                }
                Command::TraceStart(request, reply) => {
                    let started = self.trace_start(&request);
                    let slot = started.as_ref().ok().map(|(slot, _)| *slot);
                    // The asker gone already (its client left): nothing would end the trace.
                    if reply.send(started).is_err()
                        && let Some(slot) = slot
                    {
                        self.trace_stop(slot);
                    }
                }
                Command::TraceStop(slot) => self.trace_stop(slot),
                Command::Stop => break,
            }
        }
        self.traces.close();
        self.checkers.stop();
        // A clean stop: the routers stop sending this node traffic (a crash keeps the routes,
        // and the pinned program keeps serving them).
        match self.routes.apply(&Default::default()) {
            Ok(change) if !change.withdrawn.is_empty() => {
                tracing::info!(withdrawn = %addresses(&change.withdrawn), "stopping: VIP routes withdrawn")
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "stopping: VIP routes not withdrawn"),
        }
        if let Some(proxy) = &mut self.proxy {
            proxy.shutdown(self.config.daemon.shutdown_grace);
        }
        self.dp
    }

    /// Puts back pins removed under the running daemon (its own link reference kept the
    /// program on the interface meanwhile), and says so loudly: the log, an event, `status`
    /// and `lb_pins_restored_total`.
    fn check_pins(&mut self) {
        let check = match self.dp.check_pins() {
            Ok(check) => check,
            Err(e) => {
                tracing::error!(error = %e, "the balancer's pins were removed and cannot be pinned again; a restart of the daemon would lose the connection table");
                return;
            }
        };
        if !check.restored.is_empty() {
            self.pins_restored = (self.pins_restored.0 + 1, Some(unix_now()));
            let message = format!(
                "pins removed while the daemon runs (the daemon's own link kept the balancer on {}); pinned again: {}",
                self.options.interface,
                check.restored.join(", ")
            );
            tracing::error!("{message}");
            self.events.record("pins", None, None, message);
        }
        let iface = &self.options.interface;
        if check.attached_again {
            self.attached_again = (self.attached_again.0 + 1, Some(unix_now()));
            self.detached = false;
            let message = format!(
                "the XDP program had come off {iface} (its link detached, or the interface made anew) and is attached again"
            );
            tracing::error!("{message}");
            self.events.record("pins", None, None, message);
        }
        // Said once when it starts failing, not at every check: the check retries every few
        // seconds until an interface of that name is there.
        if let Some(why) = &check.detached
            && !self.detached
        {
            self.detached = true;
            let message =
                format!("the XDP program is no longer on {iface} and cannot be attached again yet ({why}); retrying");
            tracing::error!("{message}");
            self.events.record("pins", None, None, message);
        }
    }

    /// Writes the state the daemon started with (the first apply: onto what the pins hold).
    fn write_first(&mut self) -> Result<(), DaemonError> {
        let report = self.applier.apply(&mut *self.dp, &MapContents::of(&self.state))?;
        tracing::info!(
            vips = self.state.vips.len(),
            backends = self.state.vips.iter().map(|v| v.backends.len()).sum::<usize>(),
            changes = %describe(&report),
            "maps written"
        );
        Ok(())
    }

    /// Opens the kernel routing table of the announced VIPs (when the data plane is real).
    fn open_routes(&mut self) -> Result<(), String> {
        if !self.options.kernel_routes {
            return Ok(());
        }
        let table = self.config.daemon.announce_table;
        if self.state.vips.iter().any(|v| v.announce.is_some()) {
            let socket = &self.config.daemon.bird_socket;
            if let Some(problem) = announce::Bird::check(socket).problem() {
                tracing::warn!(
                    table,
                    bird_socket = %socket.display(),
                    "VIPs are to be announced but {problem}; until then their routes are kept in table {table} and nobody announces them"
                );
            }
        }
        let routes = KernelRoutes::open(table, self.runtime.clone())
            .map_err(|e| format!("opening routing table {table} for the announced VIPs: {e}"))?;
        self.routes = Box::new(routes);
        Ok(())
    }

    pub(super) fn routes_announced(&self) -> Vec<std::net::IpAddr> {
        self.routes.announced().into_iter().collect()
    }

    /// Reads the announced routes back and brings them in line again: a failed change is
    /// retried, a route removed by hand is put back (nothing to do without announced VIPs).
    fn check_routes(&mut self) {
        if announce::wanted(&self.state).is_empty() && self.routes.announced().is_empty() {
            return;
        }
        if let Err(e) = self.routes.reread() {
            tracing::warn!(error = %e, "could not read the announced routes back");
        }
        self.sync_routes();
    }

    /// Brings the announced routes in line with the state.
    fn sync_routes(&mut self) {
        let want = announce::wanted(&self.state);
        match self.routes.apply(&want) {
            Ok(change) if change.is_empty() => {}
            Ok(change) => tracing::info!(
                announced = %addresses(&change.announced),
                withdrawn = %addresses(&change.withdrawn),
                table = self.config.daemon.announce_table,
                "VIP routes changed"
            ),
            Err(e) => tracing::error!(error = %e, "VIP routes not changed"),
        }
    }

    /// Flows a peer placed: recorded as if this node had placed them (DSR VIPs only: a NAT
    /// flow's replies are tied to the node that translated it).
    fn on_shared_flows(&mut self, flows: &[WireFlow]) {
        let Some((_, counters)) = &self.sharing else { return };
        let mut shared = Vec::with_capacity(flows.len());
        for f in flows {
            let vip = self
                .state
                .vips
                .iter()
                .find(|v| v.address == f.vip.ip() && v.port == f.vip.port() && v.protocol.ip_proto() == f.protocol);
            let found =
                vip.filter(|v| matches!(v.forwarding, Forwarding::DsrIpip | Forwarding::DsrGue | Forwarding::DsrL2));
            // The key the data plane builds from the packet: 16-byte addresses, either family.
            let (src, family) = lb_common::ip_bytes(f.client.ip());
            let (dst, vip_family) = lb_common::ip_bytes(f.vip.ip());
            match found {
                Some(v) if family == vip_family => match v.backend(f.backend) {
                    Some(b) => shared.push(SharedFlow {
                        key: FlowKey::new(src, dst, f.client.port().to_be(), f.vip.port().to_be(), f.protocol, family),
                        backend_id: b.id,
                        vip_id: v.id,
                    }),
                    None => Counters::add(&counters.flows_unknown, 1),
                },
                _ => Counters::add(&counters.flows_unknown, 1),
            }
        }
        match self.dp.record_shared_flows(&shared) {
            Ok(n) => Counters::add(&counters.flows_recorded, n as u64),
            Err(e) => tracing::warn!(error = %e, "flow sharing: flows not recorded"),
        }
    }

    /// `node drain` / `node undrain`.
    fn node(&mut self, drain: bool) -> Result<NodeView, ApiError> {
        // Draining withdraws announced VIP routes and nothing else: on a daemon that announces
        // none it would report a drain while every VIP keeps taking new connections.
        if drain && !self.state.vips.iter().any(|v| v.announce.is_some()) {
            return Err(ApiError::bad_request(
                "no VIP of this daemon is announced (`announce` in [[vip]]), so a node drain would change nothing: \
                 new connections keep coming; to stop sending new connections to a backend use `lb-ctl backends drain \
                 VIP ADDRESS`; nothing was changed",
            ));
        }
        let mut next = self.state.clone();
        next.node_drained = drain;
        self.commit(next)?;
        let announced: Vec<std::net::IpAddr> = self.routes.announced().into_iter().collect();
        let message = match drain {
            true => "node drained: no VIP announced; established flows are still forwarded".to_string(),
            false => format!("node undrained: {} VIP address(es) announced", announced.len()),
        };
        tracing::info!(announced = %addresses(&announced), "{message}");
        Ok(NodeView { drained: drain, announced, message })
    }

    fn handle(&mut self, request: Request) -> Result<Response, ApiError> {
        match request {
            Request::Status => Ok(Response::Status(Box::new(self.status()))),
            Request::Vips => self.vips().map(Response::Vips),
            Request::Backends { vip } => self.backends(vip.as_deref()).map(Response::Backends),
            Request::Add(r) => {
                self.refuse_not_adjacent(&r)?;
                self.change("add", "added", |s| s.add_backend(&r.vip, &r.address, r.weight)).map(Response::Changed)
            }
            Request::Remove(r) => {
                self.change("remove", "removed", |s| s.remove_backend(&r.vip, &r.address)).map(Response::Changed)
            }
            Request::Drain(r) => self
                .change("drain", "draining: no new flows, established ones stay", |s| {
                    s.drain_backend(&r.vip, &r.address)
                })
                .map(Response::Changed),
            Request::Undrain(r) => self
                .change("undrain", "undrained: takes new flows again (once healthy)", |s| {
                    s.undrain_backend(&r.vip, &r.address)
                })
                .map(Response::Changed),
            Request::Events => Ok(Response::Events(self.events.newest_first())),
            Request::Stats => self.stats().map(Response::Stats),
            Request::Metrics => self.metrics().map(Response::Metrics),
            Request::Node { drain } => self.node(drain).map(Response::Node),
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
        let writing = Instant::now();
        let applied = self.applier.apply(&mut *self.dp, &MapContents::of(&next));
        self.map_writes.observe(writing.elapsed().as_secs_f64());
        match applied {
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
                self.sync_routes();
                if let Some((book, _)) = &self.sharing {
                    *book.write().expect("the id book is never poisoned") = IdBook::of(&self.state);
                }
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
    /// The dsr-l2 backends the host does not reach on a link (on a real host only).
    fn not_adjacent(&self) -> Vec<String> {
        if !self.options.kernel_routes {
            return Vec::new();
        }
        crate::adjacency::problems(&self.state)
    }

    /// `backends add` of a dsr-l2 backend the host does not reach on a link: refused, since
    /// every packet sent to it would be dropped.
    fn refuse_not_adjacent(&self, r: &crate::api::types::BackendRequest) -> Result<(), ApiError> {
        if !self.options.kernel_routes {
            return Ok(());
        }
        let mut next = self.state.clone();
        let id = next.add_backend(&r.vip, &r.address, r.weight)?;
        let Some((vip, backend)) = next.backend_by_id(id) else { return Ok(()) };
        match crate::adjacency::problem(vip, backend.address) {
            Some(problem) => Err(ApiError::bad_request(format!("{problem}; nothing was changed"))),
            None => Ok(()),
        }
    }

    fn change(
        &mut self,
        kind: &str,
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
        self.events.record(kind, Some(vip.clone()), Some(backend), format!("{message} (API)"));
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
                tracing::debug!(backend_id = event.backend_id, changes = %describe(&report), "health applied");
                if let Some((vip, backend)) = self.state.backend_by_id(event.backend_id) {
                    let message = format!("backend is {}: {}", event.health.as_str(), event.reason);
                    self.events.record("health", Some(vip.label()), Some(backend.address), message);
                }
                let count = self.transitions.get(&event.backend_id).map_or(0, |t| t.count) + 1;
                let last = health::Transition { at_unix: unix_now(), reason: event.reason, count };
                self.transitions.insert(event.backend_id, last);
                self.save_ids();
            }
            Err(e) => {
                tracing::error!(backend_id = event.backend_id, error = %e, "health transition not applied")
            }
        }
    }

    /// A host name resolved again: its addresses' changes become backend changes. A failed
    /// lookup, or one with no usable address, changes nothing (a DNS outage must not empty a
    /// VIP).
    fn on_resolved(&mut self, answer: Answer) {
        let Answer { target, result } = answer;
        let Some(vip) = self.config.vips.iter().find(|v| v.identity() == target.vip) else { return };
        let Some(host) = vip.hosts.iter().find(|h| h.host == target.host && h.port == target.port) else {
            return; // the file changed since the lookup started
        };
        let host = host.clone();
        let (label, name) = (vip.label(), host.host.clone());
        let found = match result {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(vip = %label, host = %name, error = %e, "backend host name did not resolve; its backends stay as they are");
                return;
            }
        };
        let (usable, refused) =
            hosts::usable(vip.forwarding, SocketAddr::new(vip.address, vip.port), vip.encap_source, &found);
        if usable.is_empty() {
            let why = refused.unwrap_or_else(|| "no address".into());
            tracing::warn!(vip = %label, host = %name, "backend host name gives no usable address ({why}); its backends stay as they are");
            return;
        }
        let mut next = self.state.clone();
        let hold = self.config.daemon.resolve_hold;
        let changes = match next.resolved(target.vip, &host, &usable, std::time::Instant::now(), hold) {
            Ok(changes) if changes.is_empty() => return,
            Ok(changes) => changes,
            Err(e) => {
                tracing::error!(vip = %label, host = %name, error = %e, "new addresses of a backend host name not applied");
                return;
            }
        };
        match self.commit(next) {
            Ok(report) => {
                tracing::info!(vip = %label, host = %name, changes = %describe(&report), "backend host name resolved again: {changes}");
                self.events.record("resolve", Some(label), None, format!("{name} resolved again: {changes}"));
            }
            Err(e) => {
                tracing::error!(vip = %label, host = %name, error = %e, "new addresses of a backend host name not applied")
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
        if view.ok {
            self.reloads.0 += 1;
            self.events.record("reload", None, None, format!("reloaded: {}", view.message));
        } else {
            self.reloads.1 += 1;
            self.events.record("reload", None, None, view.message.clone());
        }
        self.last_reload = Some(view.clone());
        view
    }

    /// The fleet's state: applied as a reload of the file with the fleet's VIPs in it.
    fn apply_fleet(&mut self, snapshot: crate::fleet::Snapshot) -> Result<String, String> {
        let previous = self.fleet.replace(snapshot);
        let result = self.try_reload();
        if result.is_err() {
            self.fleet = previous;
        }
        let view = match &result {
            Ok(message) => ReloadView { at_unix: unix_now(), ok: true, message: format!("fleet: {message}") },
            Err(e) => ReloadView {
                at_unix: unix_now(),
                ok: false,
                message: format!("fleet state refused, nothing changed:\n{e}"),
            },
        };
        self.events.record("fleet", None, None, view.message.clone());
        self.last_reload = Some(view);
        result.map_err(|e| e.to_string())
    }

    fn try_reload(&mut self) -> Result<String, ReloadError> {
        // In a fleet the VIPs are the fleet's, whatever the file holds.
        let (config, drains) = match &self.fleet {
            Some(snapshot) => snapshot.compose(&self.config.source).map_err(ReloadError::Fleet)?,
            None => (Config::load(&self.config.source)?, Vec::new()),
        };
        let (old, new) = (&self.config.daemon, &config.daemon);
        let fixed = [
            ("ring_size", old.ring_size.to_string(), new.ring_size.to_string()),
            ("flow_table_size", old.flow_table_size.to_string(), new.flow_table_size.to_string()),
            (
                "api_socket",
                unset_or(old.api_socket.as_ref().map(|p| p.display())),
                unset_or(new.api_socket.as_ref().map(|p| p.display())),
            ),
            ("api_tcp", unset_or(old.api_tcp), unset_or(new.api_tcp)),
            ("metrics", unset_or(old.metrics), unset_or(new.metrics)),
            ("proxy_workers", unset_or(old.proxy_workers), unset_or(new.proxy_workers)),
            ("announce_table", old.announce_table.to_string(), new.announce_table.to_string()),
        ];
        if self.config.fleet != config.fleet {
            return Err(ReloadError::Fixed(vec![format!(
                "{}: [fleet] cannot change without a restart",
                config.source.display()
            )]));
        }
        if self.config.cluster != config.cluster {
            return Err(ReloadError::Fixed(vec![format!(
                "{}: [cluster] cannot change without a restart",
                config.source.display()
            )]));
        }
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
            return Err(ReloadError::Fixed(changed));
        }
        let undone = self.state.api_changes();
        let mut next = State::from_config(&config, &self.state)?;
        crate::fleet::state::apply_drains(&mut next, &drains)?;
        let report = self.commit(next)?;
        let new_level =
            (config.daemon.log_level != self.config.daemon.log_level).then(|| config.daemon.log_level.clone());
        self.config = config;
        self.resolve_plan.send_replace(Plan::of(&self.config));
        // Proxy VIPs are not in the maps: their changes are reported by the proxy runtime.
        let proxy_changes = self.proxy.as_ref().map(|p| p.last_changes().join(", ")).unwrap_or_default();
        let mut message = match (report.is_empty(), proxy_changes.is_empty()) {
            (_, true) => describe(&report),
            (true, false) => proxy_changes,
            (false, false) => format!("{}, {proxy_changes}", describe(&report)),
        };
        if !undone.is_empty() {
            let what: Vec<String> = undone.iter().map(|c| c.to_string()).collect();
            message.push_str(&format!(
                "; undid {} API changes ({}; the file is the truth after a reload)",
                undone.len(),
                what.join(", ")
            ));
        }
        // Forwarding turned off since attach (or a reload's first XDP VIP): the reload goes
        // through, and says what it breaks.
        if self.options.kernel_routes
            && let Ok(Some(switch)) = crate::host::forwarding_off(&self.config, &self.options.interface)
        {
            let warning = format!(
                "warning: {switch}=0: new flows of the NAT and DSR VIPs are dropped (no route); turn it on with `sysctl -w {switch}=1`"
            );
            tracing::warn!("{warning}");
            message.push_str(&format!("; {warning}"));
        }
        for problem in self.not_adjacent() {
            tracing::warn!("{problem}");
            message.push_str(&format!("; warning: {problem}"));
        }
        if let Some(level) = new_level {
            match crate::logging::follow_file(&level) {
                true => message.push_str(&format!("; log level {level:?}")),
                false => message.push_str(&format!("; log level {level:?} not applied (--log-level is in force)")),
            }
        }
        Ok(message)
    }

    /// Records the proxy backends' new outlier ejections as events (each is logged where it
    /// happens, in lb-proxy, which counts them; the daemon reads the counts on every API call
    /// and every few seconds).
    fn note_ejections(&mut self) {
        let Some(proxy) = &self.proxy else { return };
        for vip in proxy.handle().stats() {
            for b in &vip.backends {
                let seen = self.ejections_seen.entry((vip.name.clone(), b.addr)).or_insert(0);
                if b.ejections > *seen {
                    let (new, total) = (b.ejections - *seen, b.ejections);
                    *seen = total;
                    let message = format!("ejected by outlier detection ({new} new, {total} in all)");
                    self.events.record("ejected", Some(vip.name.clone()), Some(b.addr), message);
                }
            }
        }
    }

    /// Takes back the health changes a previous run saved (when and why, not how many: the
    /// count is of this run's transitions), for the backends that are still there.
    pub(super) fn restore_health_changes(&mut self, saved: Option<&SavedState>) {
        let Some(saved) = saved else { return };
        for (id, change) in &saved.health_changes {
            if self.state.backend_by_id(*id).is_some() {
                let at_unix = change.at_unix;
                let restored = health::Transition { at_unix, reason: change.reason.clone(), count: 0 };
                self.transitions.entry(*id).or_insert(restored);
            }
        }
        // Saved with the rest once the daemon has started (a failed start saves nothing).
    }

    fn save_ids(&mut self) {
        let Some(path) = &self.options.ids_file else { return };
        let mut ids = self.state.saved();
        ids.health_changes = self
            .transitions
            .iter()
            .filter(|(id, _)| self.state.backend_by_id(**id).is_some())
            .map(|(id, t)| (*id, HealthChange { at_unix: t.at_unix, reason: t.reason.clone() }))
            .collect();
        if self.saved.as_ref() == Some(&ids) {
            return;
        }
        let tmp = path.with_extension("tmp");
        let result = serde_json::to_vec(&ids)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, path));
        match result {
            Ok(()) => self.saved = Some(ids),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot save the ids; a restart may re-place flows")
            }
        }
    }
}

/// Addresses as a log field: `203.0.113.10, 2001:db8::10`.
fn addresses(list: &[std::net::IpAddr]) -> String {
    list.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(", ")
}

/// A setting as the reload's message says it: its value, or `unset`.
fn unset_or(value: Option<impl std::fmt::Display>) -> String {
    value.map_or_else(|| "unset".to_string(), |v| v.to_string())
}
