//! `lb-ctl`: the daemon (`attach`) and the commands that talk to it over its control socket.
//!
//! Exit codes: 0 success; 1 the daemon refused the request (unknown VIP, duplicate backend,
//! malformed address, weight out of range, reload with mistakes...) or the command failed;
//! 2 bad command line; 3 the daemon could not be reached.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use ipnet::Ipv4Net;
use lb_ctl::api::client::{Client, ClientError};
use lb_ctl::api::types::{BackendRequest, ExplainRequest};
use lb_ctl::cli::render;
use lb_ctl::config::{Config, default_api_socket};
use lb_ctl::daemon::{self, Daemon, Request};
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::load::AttachMode;
use serde::Serialize;

#[derive(Parser)]
#[command(name = "lb-ctl", version, about = "XDP load balancer: daemon and control commands")]
struct Cli {
    /// Control socket of the daemon to talk to (or $LB_CTL_SOCKET).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// Interface whose daemon to talk to (its socket is /run/lb-ctl/IFACE.sock). Without this
    /// or --socket, the only daemon running is used.
    #[arg(long = "iface", short = 'i', global = true, value_name = "IFACE")]
    daemon_iface: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the balancer on IFACE in the foreground until SIGTERM/SIGINT (SIGHUP reloads).
    Attach(AttachArgs),
    /// Check a configuration file and print its mistakes (file:line), without touching anything.
    Validate {
        #[arg(long, short = 'c')]
        config: PathBuf,
    },
    /// Re-read the configuration and apply only the difference; a file with mistakes changes
    /// nothing.
    Reload,
    /// Take the balancer off IFACE: the XDP program (which keeps forwarding while the daemon
    /// is stopped or restarting), its pinned maps with the connection table, and the saved
    /// ids. Stop the daemon first.
    Detach {
        iface: String,
        /// bpffs directory of the maps (default /sys/fs/bpf/lb-ctl/IFACE).
        #[arg(long)]
        pin_dir: Option<PathBuf>,
        /// Directory of the saved ids, as given to attach (default /run/lb-ctl).
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Backends of the VIPs.
    #[command(subcommand)]
    Backends(BackendsCommand),
    /// The VIPs.
    #[command(subcommand)]
    Vips(VipsCommand),
    /// The daemon's state at a glance.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Counters of the data plane, per VIP and per backend.
    Stats {
        #[arg(long)]
        json: bool,
    },
    /// Which backend a flow from CLIENT would get, and why (connection table or ring slot).
    Explain {
        /// VIP name, ADDR:PORT[/PROTOCOL] or ADDR.
        vip: String,
        /// ADDR, or ADDR:PORT (the port is needed to check the connection table and for
        /// hash = "flow" VIPs).
        client: String,
        #[arg(long)]
        json: bool,
    },
    /// The DSR decapsulator for backends.
    #[command(subcommand)]
    Decap(DecapCommand),
    /// Run the userspace proxy for the proxy VIPs of a configuration.
    Proxy(ProxyArgs),
}

/// `lb-ctl proxy`: the proxy VIPs of a configuration, without XDP (and without root for
/// unprivileged ports). The same daemon: health checks, reload, the backends API.
#[derive(Args)]
struct ProxyArgs {
    /// Configuration file; every VIP in it must be a proxy VIP (protocol "http" or
    /// forwarding "proxy").
    #[arg(long, short = 'c')]
    config: PathBuf,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[arg(long, default_value = "info")]
    log_level: String,
}

#[derive(Args)]
struct AttachArgs {
    /// Network interface to balance on (the one VIP traffic arrives on).
    iface: String,
    /// lb.toml (see lb.toml.example): checked whole before anything is attached.
    #[arg(long, short = 'c')]
    config: PathBuf,
    /// native (driver), skb (generic), or auto: native, else skb with a warning saying why.
    #[arg(long, value_enum, default_value_t = XdpMode::Auto)]
    xdp_mode: XdpMode,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// A tracing filter: error, warn, info, debug, trace, or per module (lb_ctl=debug).
    #[arg(long, default_value = "info")]
    log_level: String,
    /// bpffs directory to pin the maps in (default /sys/fs/bpf/lb-ctl/IFACE).
    #[arg(long)]
    pin_dir: Option<PathBuf>,
    /// Directory of the saved ids (default /run/lb-ctl).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Test only: keep the maps in memory instead of loading the XDP program.
    #[arg(long, hide = true)]
    fake_dataplane: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum XdpMode {
    /// Driver mode only.
    Native,
    /// Generic mode only.
    Skb,
    /// Native, falling back to skb with a warning.
    Auto,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum BackendsCommand {
    /// Add a backend (it takes traffic once healthy).
    Add {
        vip: String,
        /// ADDR:PORT, or ADDR for the VIP's port.
        address: String,
        /// Relative weight, 0-65535 (default 100).
        #[arg(long)]
        weight: Option<u64>,
    },
    /// Remove a backend: its flows move to other backends.
    Remove { vip: String, address: String },
    /// Drain a backend: no new flows, established ones stay.
    Drain { vip: String, address: String },
    /// Backends with weight, health, state, traffic and active flows.
    List {
        vip: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum VipsCommand {
    /// The VIPs with their forwarding, health summary and traffic.
    List {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum DecapCommand {
    /// Attach the IPIP decapsulator to IFACE (on a DSR backend). It stays attached after this
    /// command exits (pinned under /sys/fs/bpf/lb-ctl/decap-IFACE).
    Attach {
        iface: String,
        /// Outer sources to accept IPIP from: the balancers' `encap_source` addresses, as
        /// ADDR or PREFIX/LEN; repeat for more (0.0.0.0/0 accepts any source). IPIP from
        /// elsewhere is left to the stack, unopened.
        #[arg(long = "from", required = true, value_name = "PREFIX", value_parser = parse_prefix)]
        from: Vec<Ipv4Net>,
        #[arg(long, value_enum, default_value_t = XdpMode::Auto)]
        xdp_mode: XdpMode,
    },
    /// Detach it.
    Detach { iface: String },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Attach(args) => attach(args).map(|()| ExitCode::SUCCESS),
        Command::Validate { config } => validate(&config),
        Command::Detach { iface, pin_dir, state_dir } => {
            let socket = cli.socket.or_else(|| std::env::var_os("LB_CTL_SOCKET").map(PathBuf::from));
            detach(&iface, pin_dir, state_dir, socket).map(|()| ExitCode::SUCCESS)
        }
        Command::Decap(command) => decap(command).map(|()| ExitCode::SUCCESS),
        Command::Proxy(args) => proxy(args).map(|()| ExitCode::SUCCESS),
        command => return client_command(cli.socket, cli.daemon_iface, command),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lb-ctl: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// An IPv4 prefix (`198.51.100.0/24`) or a single address (`198.51.100.1`, as /32).
fn parse_prefix(text: &str) -> Result<Ipv4Net, String> {
    text.parse::<Ipv4Net>()
        .or_else(|_| text.parse::<std::net::Ipv4Addr>().map(Ipv4Net::from))
        .map_err(|_| format!("{text:?} is not an IPv4 address or prefix (like 198.51.100.1 or 198.51.100.0/24)"))
}

fn decap(command: DecapCommand) -> anyhow::Result<()> {
    use lb_ctl::dataplane::attach::{attach_decap, detach_decap};
    match command {
        DecapCommand::Attach { iface, from, xdp_mode } => {
            let (mode, native_refused) = attach_decap(&iface, xdp_mode.into(), &from)
                .with_context(|| format!("attaching the decapsulator to {iface}"))?;
            if let Some(why) = native_refused {
                eprintln!("lb-ctl: warning: native XDP refused on {iface} ({why}); using skb mode");
            }
            println!("decapsulator attached to {iface} ({})", if mode == aya::programs::XdpMode::Skb { "skb" } else { "native" });
        }
        DecapCommand::Detach { iface } => {
            detach_decap(&iface).with_context(|| format!("detaching the decapsulator from {iface}"))?;
            println!("decapsulator detached from {iface}");
        }
    }
    Ok(())
}

impl From<XdpMode> for AttachMode {
    fn from(mode: XdpMode) -> AttachMode {
        match mode {
            XdpMode::Native => AttachMode::Native,
            XdpMode::Skb => AttachMode::Skb,
            XdpMode::Auto => AttachMode::Auto,
        }
    }
}


fn validate(path: &Path) -> anyhow::Result<ExitCode> {
    match Config::load(path) {
        Ok(c) => {
            let backends: usize = c.vips.iter().map(|v| v.backends.len()).sum();
            println!("{}: ok ({} VIPs, {backends} backends)", path.display(), c.vips.len());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

fn init_logging(format: LogFormat, level: &str) -> anyhow::Result<()> {
    let filter =
        tracing_subscriber::EnvFilter::try_new(level).with_context(|| format!("--log-level {level:?}"))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Ok(())
}

fn attach(args: AttachArgs) -> anyhow::Result<()> {
    init_logging(args.log_format, &args.log_level)?;
    // The whole file is checked before anything is touched.
    let config = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => bail!("{} has mistakes, nothing was attached:\n{e}", args.config.display()),
    };
    let iface = args.iface.clone();
    let pin_dir = args.pin_dir.clone().unwrap_or_else(|| lb_ctl::attach::pin_dir(&iface));
    let ids_file = match &args.state_dir {
        Some(dir) => dir.join(format!("{iface}.ids.json")),
        None => lb_ctl::attach::ids_file(&iface),
    };
    check_pinned_ring_size(&pin_dir, &ids_file, &config, &iface)?;
    let socket = config.api_socket(&iface);
    let fake = args.fake_dataplane;
    serve_daemon(config, socket, Some(ids_file), &args.iface.clone(), move |config| {
        if fake {
            tracing::warn!("test mode: in-memory maps, no XDP program");
            return Ok((Box::new(lb_ctl::dataplane::fake::FakeDataplane::default()) as Box<dyn Dataplane>, None));
        }
        let options = lb_ctl::attach::OpenOptions {
            mode: args.xdp_mode.into(),
            pin_dir: pin_dir.clone(),
            ring_size: config.daemon.ring_size,
            flow_table_size: config.daemon.flow_table_size,
        };
        let opened = lb_ctl::attach::open(&iface, &options)
            .with_context(|| format!("attaching the balancer to {iface}"))?;
        Ok((opened.dataplane, Some(opened.mode.to_string())))
    })
}

fn proxy(args: ProxyArgs) -> anyhow::Result<()> {
    init_logging(args.log_format, &args.log_level)?;
    let config = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => bail!("{} has mistakes, nothing was started:\n{e}", args.config.display()),
    };
    if let Some(v) = config.vips.iter().find(|v| v.forwarding.is_xdp()) {
        bail!(
            "{}: VIP {} is forwarded by XDP (forwarding = \"{}\"); `lb-ctl proxy` serves proxy VIPs only \
             (use `lb-ctl attach IFACE` for XDP VIPs: it runs the proxy VIPs too)",
            args.config.display(),
            v.label(),
            v.forwarding.as_str()
        );
    }
    let socket = match &config.daemon.api_socket {
        Some(path) => path.clone(),
        None => proxy_socket(),
    };
    // No XDP: the map writer writes to memory, which only `stats` and `explain` read.
    serve_daemon(config, socket, None, "proxy", |_| {
        Ok((Box::new(lb_ctl::dataplane::fake::FakeDataplane::default()) as Box<dyn Dataplane>, None))
    })
}

/// The proxy's default control socket: /run/lb-ctl/proxy.sock for root, else under the
/// user's runtime directory (or /tmp/lb-ctl-UID).
fn proxy_socket() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from("/run/lb-ctl/proxy.sock");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) => PathBuf::from(dir).join("lb-ctl/proxy.sock"),
        None => PathBuf::from(format!("/tmp/lb-ctl-{uid}/proxy.sock")),
    }
}

/// Runs the daemon until SIGTERM/SIGINT: the control socket (and admin TCP port), the data
/// plane `open` gives (called once the sockets are bound), SIGHUP reloads.
fn serve_daemon(
    config: Config,
    socket: PathBuf,
    ids_file: Option<PathBuf>,
    label: &str,
    open: impl FnOnce(&Config) -> anyhow::Result<(Box<dyn Dataplane>, Option<String>)>,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    let label = label.to_string();
    runtime.block_on(async move {
        let unix = lb_ctl::api::server::bind_unix(&socket)
            .with_context(|| format!("binding the control socket {}", socket.display()))?;
        let tcp = match config.daemon.api_tcp {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding the admin TCP port {addr}"))?,
            ),
            None => None,
        };
        if let Some(dir) = ids_file.as_ref().and_then(|f| f.parent()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let (dataplane, mode) = open(&config)?;
        tracing::info!(
            interface = %label,
            xdp_mode = mode.as_deref().unwrap_or("none"),
            config = %config.source.display(),
            socket = %socket.display(),
            "started"
        );
        let options = daemon::Options { interface: label.clone(), xdp_mode: mode, ids_file };
        let daemon = Daemon::start(config, dataplane, options).context("writing the initial map contents")?;
        let handle = daemon.handle();
        let reloads = tokio::spawn(async move {
            let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
                return;
            };
            while hup.recv().await.is_some() {
                tracing::info!("SIGHUP: reloading");
                // The writer logs the outcome.
                let _ = handle.call(Request::Reload).await;
            }
        });
        lb_ctl::api::server::serve(daemon.handle(), unix, tcp, shutdown_signal()).await;
        reloads.abort();
        daemon.stop().await;
        tracing::info!(interface = %label, "stopped; an attached balancer keeps forwarding (`lb-ctl detach` removes it)");
        Ok(())
    })
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        std::future::pending::<()>().await;
        return;
    };
    let which = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    tracing::info!("{which}: stopping");
}

/// Pinned maps are sized for one ring size: a daemon with another cannot reuse them.
fn check_pinned_ring_size(
    pin_dir: &Path,
    ids_file: &Path,
    config: &Config,
    iface: &str,
) -> anyhow::Result<()> {
    if !pin_dir.join(lb_common::map_names::RINGS).exists() {
        return Ok(());
    }
    let Ok(text) = std::fs::read_to_string(ids_file) else { return Ok(()) };
    let Ok(ids) = serde_json::from_str::<lb_ctl::state::IdSnapshot>(&text) else { return Ok(()) };
    match ids.ring_size {
        Some(pinned) if pinned != config.daemon.ring_size => bail!(
            "the maps pinned in {} were written with ring_size {pinned}, the configuration asks for {}; \
             keep {pinned}, or run `lb-ctl detach {iface}` first (established flows are then lost)",
            pin_dir.display(),
            config.daemon.ring_size
        ),
        _ => Ok(()),
    }
}

/// Removes the pins and saved ids of a stopped daemon. `socket` is the daemon's control socket
/// when it is not the default one (`--socket`): a daemon still answering there is not detached.
fn detach(
    iface: &str,
    pin_dir: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    socket: Option<PathBuf>,
) -> anyhow::Result<()> {
    let socket = socket.unwrap_or_else(|| default_api_socket(iface));
    if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
        bail!(
            "the daemon on {iface} is running ({}); stop it first (systemctl stop lb-ctl@{iface})",
            socket.display()
        );
    }
    match (pin_dir, state_dir) {
        (None, None) => lb_ctl::attach::detach(iface).with_context(|| format!("detaching from {iface}"))?,
        (pin_dir, state_dir) => {
            let dir = pin_dir.unwrap_or_else(|| lb_ctl::attach::pin_dir(iface));
            lb_ctl::dataplane::attach::detach(&dir)
                .with_context(|| format!("removing the pinned balancer in {}", dir.display()))?;
            let ids = match state_dir {
                Some(d) => d.join(format!("{iface}.ids.json")),
                None => lb_ctl::attach::ids_file(iface),
            };
            match std::fs::remove_file(&ids) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("removing {}", ids.display()));
                }
                _ => {}
            }
        }
    }
    println!("{iface}: pinned maps and saved ids removed");
    Ok(())
}

/// The socket to talk to: --socket, $LB_CTL_SOCKET, --iface, or the only one in /run/lb-ctl
/// of this network namespace.
fn find_socket(socket: Option<PathBuf>, iface: Option<String>) -> Result<PathBuf, String> {
    if let Some(s) = socket.or_else(|| std::env::var_os("LB_CTL_SOCKET").map(PathBuf::from)) {
        return Ok(s);
    }
    if let Some(i) = iface {
        return Ok(default_api_socket(&i));
    }
    let dir = Path::new("/run/lb-ctl");
    let suffix = lb_ctl::netns::suffix();
    let ours = |p: &Path| {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        name.ends_with(".sock")
            && if suffix.is_empty() { !name.contains("@netns") } else { name.ends_with(&format!("{suffix}.sock")) }
    };
    let sockets: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| ours(p)).collect())
        .unwrap_or_default();
    match sockets.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(format!(
            "no daemon socket in {} (is `lb-ctl attach` running? or give --iface / --socket)",
            dir.display()
        )),
        _ => Err(format!(
            "several daemons run ({} sockets in {}): pick one with --iface",
            sockets.len(),
            dir.display()
        )),
    }
}

fn client_command(socket: Option<PathBuf>, iface: Option<String>, command: Command) -> ExitCode {
    let socket = match find_socket(socket, iface) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lb-ctl: {e}");
            return ExitCode::from(3);
        }
    };
    let client = Client::new(socket);
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lb-ctl: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run_client(&client, command)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e @ ClientError::Connect { .. }) => {
            eprintln!("lb-ctl: {e} (is the daemon running? are you root?)");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("lb-ctl: {e}");
            ExitCode::FAILURE
        }
    }
}

fn json(value: &impl Serialize) -> String {
    serde_json::to_string_pretty(value).expect("API answers serialize") + "\n"
}

async fn run_client(c: &Client, command: Command) -> Result<String, ClientError> {
    let req = |vip: String, address: String, weight: Option<u64>| BackendRequest { vip, address, weight };
    Ok(match command {
        Command::Reload => format!("reloaded: {}\n", c.reload().await?.message),
        Command::Backends(BackendsCommand::Add { vip, address, weight }) => {
            c.add_backend(&req(vip, address, weight)).await?.message + "\n"
        }
        Command::Backends(BackendsCommand::Remove { vip, address }) => {
            c.remove_backend(&req(vip, address, None)).await?.message + "\n"
        }
        Command::Backends(BackendsCommand::Drain { vip, address }) => {
            c.drain_backend(&req(vip, address, None)).await?.message + "\n"
        }
        Command::Backends(BackendsCommand::List { vip, json: as_json }) => {
            let list = c.backends(vip.as_deref()).await?;
            if as_json { json(&list) } else { render::backends(&list) }
        }
        Command::Vips(VipsCommand::List { json: as_json }) => {
            let list = c.vips().await?;
            if as_json { json(&list) } else { render::vips(&list) }
        }
        Command::Status { json: as_json } => {
            let s = c.status().await?;
            if as_json { json(&s) } else { render::status(&s) }
        }
        Command::Stats { json: as_json } => {
            let s = c.stats().await?;
            if as_json { json(&s) } else { render::stats(&s) }
        }
        Command::Explain { vip, client, json: as_json } => {
            let e = c.explain(&ExplainRequest { vip, client }).await?;
            if as_json { json(&e) } else { render::explain(&e) }
        }
        Command::Attach(_)
        | Command::Validate { .. }
        | Command::Detach { .. }
        | Command::Decap(_)
        | Command::Proxy { .. } => unreachable!("handled without the daemon"),
    })
}
