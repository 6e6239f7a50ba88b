//! Commands that run the daemon in the foreground: `attach` (XDP, and the proxy VIPs) and
//! `proxy` (proxy VIPs only, no XDP).
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use tokio::sync::Notify;

use super::args::{AttachArgs, LogFormat, ProxyArgs};
use super::{instance, quick};
use crate::config::Config;
use crate::daemon::{self, Listeners};
use crate::dataplane::Dataplane;
use crate::dataplane::attach::{self, OpenOptions};
use crate::dataplane::memory::MemoryDataplane;
use crate::dataplane::previous::PreviousProgram;
use crate::host;
use crate::logging;
use crate::paths::{self, AttachPaths};
use crate::state::SavedState;

/// Logging at `--log-level`, else at the file's `[daemon] log_level`.
fn init_logging(format: LogFormat, cli_level: Option<&str>, config: &Config) -> anyhow::Result<()> {
    let level = match cli_level {
        Some(level) => logging::Level::CommandLine(level),
        None => logging::Level::File(&config.daemon.log_level),
    };
    logging::init(matches!(format, LogFormat::Json), level)
}

pub fn attach(args: AttachArgs) -> anyhow::Result<()> {
    // The whole file is checked before anything is touched.
    let config = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => bail!("{} has mistakes, nothing was attached:\n{e}", args.config.display()),
    };
    init_logging(args.log_format, args.log_level.as_deref(), &config)?;
    let iface = args.iface.clone();
    if !args.fake_dataplane {
        host::check_privileges()?;
    }
    host::check_forwarding(&config, &iface, args.enable_forwarding)?;
    let paths = AttachPaths::balancer(&iface, args.pin_dir.clone(), args.state_dir.clone());
    check_pinned_ring_size(&paths, &config, &iface)?;
    let socket = config.api_socket(&iface);
    let options = daemon::Options {
        interface: iface.clone(),
        ids_file: Some(paths.ids_file()),
        kernel_routes: !args.fake_dataplane,
        pin_dir: (!args.fake_dataplane).then(|| paths.pin_dir.clone()),
        ..Default::default()
    };
    paths::create_private_dir(&paths.state_dir).with_context(|| format!("creating {}", paths.state_dir.display()))?;
    // Held until the daemon is done: `detach` and a second `attach` see it running.
    let _lock = instance::acquire(&paths).map_err(|e| {
        anyhow::anyhow!("{iface}: {e}; stop it first (systemctl stop lb-ctl@{iface}), nothing was changed")
    })?;
    let memory = args.fake_dataplane;
    run(config, socket, options, move |config| {
        if memory {
            tracing::warn!("test mode: in-memory maps, no XDP program");
            return Ok(DaemonDataplane::memory());
        }
        let options = OpenOptions {
            mode: args.xdp_mode.into(),
            paths: paths.clone(),
            ring_size: config.daemon.ring_size,
            flow_table_size: config.daemon.flow_table_size,
        };
        let opened = attach::open(&iface, &options).with_context(|| format!("attaching the balancer to {iface}"))?;
        let xdp_mode = Some(opened.mode_name().to_string());
        Ok(DaemonDataplane {
            maps_reused: opened.reused_maps,
            xdp_mode,
            dataplane: Box::new(opened.dataplane),
            // Pins this start made go if it fails; pins found here are a running balancer's.
            made_pins: (!opened.reused_maps).then_some(paths),
            previous_program: opened.previous_program,
        })
    })
}

/// `lb-ctl proxy`; `socket` (the global `--socket`) places the quick start's control socket.
pub fn proxy(args: ProxyArgs, socket: Option<PathBuf>) -> anyhow::Result<()> {
    let path = match &args.config {
        Some(path) => path.clone(),
        None => quick_start_config(&args.quick, socket.unwrap_or_else(paths::proxy_socket))?,
    };
    let config = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => bail!("{} has mistakes, nothing was started:\n{e}", path.display()),
    };
    init_logging(args.log_format, args.log_level.as_deref(), &config)?;
    if let Some(v) = config.vips.iter().find(|v| v.forwarding.is_xdp()) {
        bail!(
            "{}: VIP {} is forwarded by XDP (forwarding = \"{}\"); `lb-ctl proxy` serves proxy VIPs only \
             (use `lb-ctl attach IFACE` for XDP VIPs: it runs the proxy VIPs too)",
            path.display(),
            v.label(),
            v.forwarding.as_str()
        );
    }
    let socket = config.daemon.api_socket.clone().unwrap_or_else(paths::proxy_socket);
    let options = daemon::Options { interface: "proxy".into(), ..Default::default() };
    if args.config.is_none() {
        quick::follow_backends_file(args.quick.clone(), socket.clone());
    }
    // No XDP: the map writer writes to memory, which only `stats` and `explain` read.
    run(config, socket, options, |_| Ok(DaemonDataplane::memory()))
}

/// Writes the lb.toml of the quick-start flags beside the control socket `socket`; returns its
/// path.
fn quick_start_config(q: &super::args::QuickStart, socket: PathBuf) -> anyhow::Result<PathBuf> {
    let dir = socket.parent().context("the control socket's directory")?;
    paths::create_private_dir(dir).with_context(|| format!("creating {}", dir.display()))?;
    let text = quick::config_text(q, &socket)?;
    let path = quick::config_path(&socket);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The data plane a command runs the daemon with.
struct DaemonDataplane {
    dataplane: Box<dyn Dataplane>,
    /// The attach mode, for XDP.
    xdp_mode: Option<String>,
    maps_reused: bool,
    /// The pins this start made (none were there): removed again if the start fails.
    made_pins: Option<AttachPaths>,
    /// The program the pinned link ran before this start: put back if the start fails.
    previous_program: Option<PreviousProgram>,
}

impl DaemonDataplane {
    fn memory() -> DaemonDataplane {
        DaemonDataplane {
            dataplane: Box::new(MemoryDataplane::default()),
            xdp_mode: None,
            maps_reused: false,
            made_pins: None,
            previous_program: None,
        }
    }
}

/// A start that failed after the control socket was bound: the socket and its lock go. The
/// data plane was given back (and closed) by then.
fn remove_socket(socket: &std::path::Path) {
    let _ = std::fs::remove_file(socket);
    let mut lock = socket.as_os_str().to_owned();
    lock.push(".lock");
    let _ = std::fs::remove_file(lock);
}

/// Runs the daemon until SIGTERM/SIGINT: binds the control socket (and admin TCP port), then
/// opens the data plane with `open`, then serves.
fn run(
    config: Config,
    socket: PathBuf,
    mut options: daemon::Options,
    open: impl FnOnce(&Config) -> anyhow::Result<DaemonDataplane>,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(async move {
        let unix = crate::api::server::bind_unix(&socket)
            .with_context(|| format!("binding the control socket {}", socket.display()))?;
        config.log_warnings();
        let mut listeners = Listeners::unix(unix);
        if let Some(addr) = config.daemon.api_tcp {
            let tcp = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the admin TCP port {addr}"))?;
            listeners.tcp = Some(tcp);
        }
        if let Some(addr) = config.daemon.metrics {
            let tcp = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the metrics port {addr}"))?;
            listeners.metrics = Some(tcp);
        }
        let opened = match open(&config) {
            Ok(opened) => opened,
            Err(e) => {
                // Nothing is served: leave no socket behind.
                drop(listeners);
                remove_socket(&socket);
                return Err(e);
            }
        };
        options.xdp_mode = opened.xdp_mode;
        options.maps_reused = opened.maps_reused;
        // The program the link ran is held until the daemon has started, then let go (its last
        // descriptor closes); a start that fails puts it back.
        let mut previous = opened.previous_program;
        let started = Arc::new(Notify::new());
        options.started = Some(started.clone());
        let serving = daemon::serve(config, listeners, opened.dataplane, options, daemon::termination());
        tokio::pin!(serving);
        let served = tokio::select! {
            served = &mut serving => served,
            () = started.notified() => {
                previous = None;
                serving.await
            }
        };
        if let Err(e) = served {
            // It never served: the host is left as it was found. Pins this start made go
            // (the program with them); a running balancer's pins found here stay, with its
            // saved ids (the writer saves them only once started), and its program goes back
            // on the link.
            remove_socket(&socket);
            let e = anyhow::Error::new(e).context("starting the daemon");
            if let Some(Err(undo)) = previous.map(PreviousProgram::put_back) {
                return Err(e.context(format!("and putting the balancer's program back failed ({undo})")));
            }
            if let Some(paths) = opened.made_pins {
                match attach::detach(&paths) {
                    Ok(removed) => {
                        tracing::info!(pin_dir = %paths.pin_dir.display(), "the failed start was undone: {removed}")
                    }
                    Err(undo) => {
                        return Err(e.context(format!(
                            "and undoing it failed ({undo}): run `lb-ctl detach` to take the balancer off"
                        )));
                    }
                }
            }
            return Err(e);
        }
        Ok(())
    })
}

/// Pinned maps are sized for one ring size: a daemon with another cannot reuse them.
fn check_pinned_ring_size(paths: &AttachPaths, config: &Config, iface: &str) -> anyhow::Result<()> {
    if !paths.pin_dir.join(lb_common::map_names::RINGS).exists() {
        return Ok(());
    }
    let Ok(text) = std::fs::read_to_string(paths.ids_file()) else { return Ok(()) };
    let Ok(ids) = serde_json::from_str::<SavedState>(&text) else { return Ok(()) };
    match ids.ring_size {
        Some(pinned) if pinned != config.daemon.ring_size => bail!(
            "the maps pinned in {} were written with ring_size {pinned}, the configuration asks for {}; \
             keep {pinned}, or run `lb-ctl detach {iface}` first (established flows are then lost)",
            paths.pin_dir.display(),
            config.daemon.ring_size
        ),
        _ => Ok(()),
    }
}
