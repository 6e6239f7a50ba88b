//! The daemon: one writer owns the data plane and the desired state, and handles every change
//! — API calls, reloads, health transitions — one message at a time, in arrival order.
//!
//! The writer runs on a blocking thread of the tokio runtime (map syscalls and Maglev builds
//! block) and receives [`Command`]s on one channel; the API server and the health checkers
//! only send messages. Every change is made on a copy of the state, applied as a map
//! difference, and kept only if the data plane accepted it.
mod events;
mod explain;
mod explain_quic;
mod metric_family;
mod metrics;
mod proxy_metrics;
mod resolver;
mod serve;
mod trace;
mod views;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, oneshot, watch};

pub use serve::{Listeners, reload_self, serve, termination};

use crate::api::trace::{TraceEvent, TraceRequest, TraceSession};
use crate::api::{ApiError, Request, Response, Service};
use crate::config::Config;
use crate::dataplane::{Dataplane, DataplaneError};
use crate::health::{self, Checkers};
use crate::state::plan::{Applier, ApplyReport, MapContents};
use crate::state::{SavedState, State, StateError};
use writer::Writer;

enum Command {
    Call(Request, oneshot::Sender<Result<Response, ApiError>>),
    Health(health::Event),
    /// Time to start a new next-hop cache generation (every `nexthop_ttl`).
    RefreshNextHops,
    /// Time to read the announced routes back and retry what failed (every
    /// `announce::CHECK_PERIOD`).
    CheckRoutes,
    /// A backend host name resolved again.
    Resolved(resolver::Answer),
    /// Time to check the balancer's pins and attachment (every [`PIN_CHECK_PERIOD`]).
    CheckPins,
    /// Flows a peer balancer placed (`[cluster]` flow sharing), to record.
    SharedFlows(Vec<crate::cluster::wire::WireFlow>),
    /// `POST /v1/trace`: a filter slot, and the trace's events.
    TraceStart(TraceRequest, oneshot::Sender<Result<(usize, mpsc::Receiver<TraceEvent>), ApiError>>),
    /// The trace of this slot ended (its stream was dropped): remove its filter.
    TraceStop(usize),
    /// The fleet's state (`[fleet]`) to apply as one reload; the answer says what changed,
    /// or why it was refused (nothing changed then).
    Fleet(Box<crate::fleet::Snapshot>, oneshot::Sender<Result<String, String>>),
    Stop,
}

/// How often the daemon checks that its pins are there and its program on the interface.
const PIN_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_secs(2);

/// Sends `command()` to the writer every `period` (the first after one period) until it stops.
fn spawn_ticks(tx: mpsc::UnboundedSender<Command>, period: std::time::Duration, command: fn() -> Command) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            if tx.send(command()).is_err() {
                break; // the writer has stopped
            }
        }
    });
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
    /// A proxy VIP could not start (its address is in use, or not this host's).
    #[error("the proxy VIPs could not start: {0}")]
    Proxy(String),
    /// The routing table for the announced VIPs could not be opened.
    #[error("{0}")]
    Routes(String),
    /// Flow sharing could not listen on `[cluster] listen`.
    #[error("cluster: cannot listen on {0}: {1}")]
    Cluster(std::net::SocketAddr, std::io::Error),
    /// The writer ended before it said how its start went (it panicked).
    #[error("the map writer stopped before it started")]
    WriterStopped,
}

/// How to reach the writer; cheap to clone.
#[derive(Clone)]
pub struct DaemonHandle {
    tx: mpsc::UnboundedSender<Command>,
    /// `[fleet]`: backend changes are written to the fleet (every node applies them).
    fleet: Option<Arc<crate::fleet::edit::FleetEditor>>,
}

impl DaemonHandle {
    /// Sends `request` to the writer and waits for its answer.
    pub async fn call(&self, request: Request) -> Result<Response, ApiError> {
        if let Some(fleet) = &self.fleet
            && let Some(answer) = fleet.handle(&request).await
        {
            return answer;
        }
        let (reply, answer) = oneshot::channel();
        self.tx.send(Command::Call(request, reply)).map_err(|_| ApiError::internal("the daemon is stopping"))?;
        answer.await.map_err(|_| ApiError::internal("the daemon is stopping"))?
    }

    /// Applies the fleet's state `snapshot` through the writer, as one reload.
    pub async fn apply_fleet(&self, snapshot: crate::fleet::Snapshot) -> Result<String, String> {
        let (reply, answer) = oneshot::channel();
        let stopping = || "the daemon is stopping".to_string();
        self.tx.send(Command::Fleet(Box::new(snapshot), reply)).map_err(|_| stopping())?;
        answer.await.map_err(|_| stopping())?
    }

    /// Whether the writer has stopped.
    pub fn is_stopped(&self) -> bool {
        self.tx.is_closed()
    }
}

impl Service for DaemonHandle {
    async fn call(&self, request: Request) -> Result<Response, ApiError> {
        DaemonHandle::call(self, request).await
    }

    async fn trace(&self, request: TraceRequest) -> Result<TraceSession, ApiError> {
        let (reply, answer) = oneshot::channel();
        self.tx.send(Command::TraceStart(request, reply)).map_err(|_| ApiError::internal("the daemon is stopping"))?;
        let (slot, events) = answer.await.map_err(|_| ApiError::internal("the daemon is stopping"))??;
        Ok(TraceSession { events, guard: Box::new(TraceGuard { tx: self.tx.clone(), slot }) })
    }
}

/// Removes a trace's filter when its session is dropped.
struct TraceGuard {
    tx: mpsc::UnboundedSender<Command>,
    slot: usize,
}

impl Drop for TraceGuard {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::TraceStop(self.slot));
    }
}

/// Settings that do not come from lb.toml.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The interface served (shown in the status).
    pub interface: String,
    /// How the program is attached (`native`, `skb`), shown in the status.
    pub xdp_mode: Option<String>,
    /// Where to keep the ids of VIPs and backends, last known health and API changes across
    /// restarts (next to the pinned maps); `None` keeps them in memory only.
    pub ids_file: Option<PathBuf>,
    /// The real data plane on this host: announce VIPs as routes in the kernel table
    /// `daemon.announce_table` (otherwise in memory only), and check the host's forwarding
    /// switches on reload.
    pub kernel_routes: bool,
    /// The data plane's maps were found pinned, with a previous run's contents.
    pub maps_reused: bool,
    /// The bpffs directory of the pins (shown in the status).
    pub pin_dir: Option<PathBuf>,
    /// `[fleet]`: the fleet state the configuration was composed with at start (the saved
    /// one, or empty), and the follower's view of etcd (status, metrics).
    pub fleet: Option<(crate::fleet::Snapshot, crate::fleet::record::SharedView)>,
    /// Notified once the daemon has started (its state written, its proxies listening).
    pub started: Option<std::sync::Arc<tokio::sync::Notify>>,
}

/// A started daemon: its writer is running.
pub struct Daemon {
    handle: DaemonHandle,
    writer: Option<tokio::task::JoinHandle<Box<dyn Dataplane>>>,
    /// Whether the writer started the proxy VIPs; taken by [`Daemon::started`].
    started: Option<oneshot::Receiver<Result<(), DaemonError>>>,
}

impl Daemon {
    /// Builds the state of `config`, starts the health checkers and the writer, which writes
    /// the state to `dataplane` once what can fail has started ([`Daemon::started`]). Must be
    /// called from within a tokio runtime.
    pub fn start(config: Config, mut dataplane: Box<dyn Dataplane>, options: Options) -> Result<Daemon, DaemonError> {
        let previous = options.ids_file.as_deref().and_then(load_saved);
        let (skeleton, applier) = match &previous {
            Some(saved) => {
                let mut skeleton = State::from_saved(saved);
                // Maps found pinned hold the previous run's entries: assume them, so the
                // first apply removes what the file lacks. Fresh maps (the pins were lost,
                // e.g. bpffs was cleared) hold nothing: everything is written, CONFIG first.
                let applier = if options.maps_reused {
                    // The saved ids say nothing of VIPs' settings (forwarding, hash, QUIC), of
                    // which VIPs the proxy serves, or of QUIC server ids: the maps do.
                    let vips = dataplane.vips()?;
                    skeleton = skeleton.as_found(&vips);
                    let quic_servers = dataplane.quic_servers()?.into_iter().collect();
                    let vips = vips.into_iter().collect();
                    Applier::assuming(MapContents { vips, quic_servers, ..MapContents::of(&skeleton) })
                } else {
                    tracing::warn!(
                        "saved ids but no pinned maps: writing every map afresh (established flows were lost with the maps)"
                    );
                    Applier::default()
                };
                (skeleton, applier)
            }
            None => (State::default(), Applier::default()),
        };
        let mut state = State::from_config(&config, &skeleton)?;
        if let Some(saved) = &previous {
            state.restore_api_changes(saved)?;
        }
        if let Some((snapshot, _)) = &options.fleet
            && let Ok((_, drains)) = snapshot.compose(&config.source)
        {
            crate::fleet::state::apply_drains(&mut state, &drains)?;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let sink_tx = tx.clone();
        let sink: health::Sink = Arc::new(move |event| {
            let _ = sink_tx.send(Command::Health(event));
        });
        if config.daemon.nexthop_ttl_ms > 0 {
            let period = std::time::Duration::from_millis(config.daemon.nexthop_ttl_ms as u64);
            spawn_ticks(tx.clone(), period, || Command::RefreshNextHops);
        }
        spawn_ticks(tx.clone(), crate::announce::CHECK_PERIOD, || Command::CheckRoutes);
        spawn_ticks(tx.clone(), PIN_CHECK_PERIOD, || Command::CheckPins);
        let mut checkers = Checkers::new(tokio::runtime::Handle::current(), sink);
        checkers.sync(&state);
        let (plan, plan_rx) = watch::channel(resolver::Plan::of(&config));
        resolver::spawn(plan_rx, crate::config::hosts::system_resolver(), tx.clone());
        let sharing = match &config.cluster {
            Some(settings) => {
                let book = Arc::new(std::sync::RwLock::new(crate::cluster::IdBook::of(&state)));
                let counters = Arc::new(crate::cluster::Counters::default());
                let share_tx = tx.clone();
                let deliver = move |flows| share_tx.send(Command::SharedFlows(flows)).is_ok();
                crate::cluster::share::start(
                    settings,
                    dataplane.take_flow_events(),
                    book.clone(),
                    counters.clone(),
                    deliver,
                )
                .map_err(|e| DaemonError::Cluster(settings.listen, e))?;
                Some((book, counters))
            }
            None => None,
        };
        let traces = trace::Traces::start(dataplane.take_trace());
        let (config_fleet, config_source) = (config.fleet.clone(), config.source.clone());
        let options_fleet = options.fleet.as_ref().map(|(_, view)| view.clone());
        let mut writer = Writer::new(dataplane, state, applier, checkers, config, options, plan);
        writer.traces = traces;
        writer.restore_health_changes(previous.as_ref());
        writer.sharing = sharing;
        let (started_tx, started_rx) = oneshot::channel();
        let writer = tokio::task::spawn_blocking(move || writer.run(rx, started_tx));
        let fleet = match (&config_fleet, &options_fleet) {
            (Some(settings), Some(view)) => Some(Arc::new(crate::fleet::edit::FleetEditor {
                settings: settings.clone(),
                config: config_source,
                view: view.clone(),
            })),
            _ => None,
        };
        Ok(Daemon { handle: DaemonHandle { tx, fleet }, writer: Some(writer), started: Some(started_rx) })
    }

    /// Waits until the writer has started every proxy VIP and written the maps; an error if it
    /// could not (the writer has then stopped, the maps as they were).
    pub async fn started(&mut self) -> Result<(), DaemonError> {
        let Some(started) = self.started.take() else { return Ok(()) };
        match started.await {
            Ok(result) => result,
            Err(_) => Err(DaemonError::WriterStopped),
        }
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

fn load_saved(path: &Path) -> Option<SavedState> {
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

#[cfg(test)]
mod tests;
