//! The daemon's run loop: the writer, the health checkers, the control API and SIGHUP reloads,
//! until a shutdown future resolves. `lb-ctl attach` and `lb-ctl proxy` call [`serve`] with
//! the sockets they bound and the data plane they opened; the tests call the same function.
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

use super::{Daemon, DaemonError, Options};
use crate::api::server::ControlSocket;
use crate::api::{self, Request};
use crate::config::Config;
use crate::dataplane::Dataplane;

/// The sockets the control API is served on, bound before the data plane is opened (a second
/// daemon for the same interface fails there, before it touches anything).
pub struct Listeners {
    pub unix: ControlSocket,
    /// The optional admin TCP port (`[daemon] api_tcp`).
    pub tcp: Option<TcpListener>,
    /// The optional metrics port (`[daemon] metrics`): `/metrics` only.
    pub metrics: Option<TcpListener>,
    pub limits: api::server::Limits,
}

impl Listeners {
    pub fn unix(unix: ControlSocket) -> Listeners {
        Listeners { unix, tcp: None, metrics: None, limits: api::server::Limits::default() }
    }
}

/// Runs the daemon until `shutdown` resolves: writes the state of `config` to `dataplane`,
/// starts the health checkers, serves the API, reloads on SIGHUP. Returns the data plane after
/// a clean stop; the maps keep their contents, so an attached balancer keeps forwarding.
pub async fn serve(
    config: Config,
    listeners: Listeners,
    dataplane: Box<dyn Dataplane>,
    options: Options,
    shutdown: impl Future<Output = ()>,
) -> Result<Box<dyn Dataplane>, DaemonError> {
    let interface = options.interface.clone();
    let xdp = options.xdp_mode.is_some();
    tracing::info!(
        interface = %interface,
        xdp_mode = options.xdp_mode.as_deref().unwrap_or("none"),
        config = %config.source.display(),
        socket = %listeners.unix.listener.local_addr().ok().and_then(|a| a.as_pathname().map(|p| p.display().to_string())).unwrap_or_default(),
        // What glibc's allocator runs with (`lb_proxy::restart_with_malloc_tuning`), from the
        // environment as glibc left it (/proc/PID/environ shows its rewritten original).
        glibc_tunables = %std::env::var("GLIBC_TUNABLES").unwrap_or_default(),
        "started"
    );
    let started = options.started.clone();
    let (config, options, follower) = crate::fleet::follow::starting(config, options);
    let mut daemon = Daemon::start(config, dataplane, options)?;
    if let Err(e) = daemon.started().await {
        daemon.stop().await;
        return Err(e);
    }
    if let Some(started) = started {
        started.notify_one();
    }
    let following = follower.map(|f| tokio::spawn(f(daemon.handle()).run()));
    let handle = daemon.handle();
    let reloads = tokio::spawn(async move {
        let Ok(mut hup) = signal(SignalKind::hangup()) else { return };
        while hup.recv().await.is_some() {
            // A reload the daemon asked for itself was logged with its reason by the asker.
            if !RELOAD_FROM_INSIDE.swap(false, Ordering::AcqRel) {
                tracing::info!("SIGHUP: reloading");
            }
            // The writer logs the outcome.
            let _ = handle.call(Request::Reload).await;
        }
    });
    let metrics = listeners.metrics.map(|listener| {
        let router = api::server::metrics_router(daemon.handle());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::warn!(error = %e, "metrics port: serving failed");
            }
        })
    });
    // The socket's lock stays held (in `listeners.unix`) until this function returns.
    api::server::serve(daemon.handle(), listeners.unix.listener, listeners.tcp, listeners.limits, shutdown).await;
    reloads.abort();
    if let Some(task) = following {
        task.abort();
    }
    if let Some(task) = metrics {
        task.abort();
    }
    let dataplane = daemon.stop().await;
    match xdp {
        true => tracing::info!(
            interface = %interface,
            "stopped; the attached balancer keeps forwarding (`lb-ctl detach {interface}` removes it)"
        ),
        false => tracing::info!("stopped; no XDP program was attached: nothing forwards for this daemon any more"),
    }
    Ok(dataplane)
}

/// Set by [`reload_self`]: the next SIGHUP was raised by the daemon itself.
static RELOAD_FROM_INSIDE: AtomicBool = AtomicBool::new(false);

/// Makes the running daemon reload its file, as SIGHUP does; the caller logs why (a quick
/// start's backends file changed), so the reload is not reported as a signal from outside.
pub fn reload_self() {
    RELOAD_FROM_INSIDE.store(true, Ordering::Release);
    // SAFETY: kill(2) on our own pid; SIGHUP makes the daemon reload its file.
    unsafe { libc::kill(libc::getpid(), libc::SIGHUP) };
}

/// Resolves on SIGTERM or SIGINT.
pub async fn termination() {
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        std::future::pending::<()>().await;
        return;
    };
    let which = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    tracing::info!("{which}: stopping");
}
