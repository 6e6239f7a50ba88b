//! Commands that run here, without a daemon: `validate`, `export`, `detach`, `upgrade-check`, `decap`.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};

use super::args::{BackendSetupArgs, DecapCommand, ExportFormat};
use super::export;
use crate::config::Config;
use crate::config::words::counted;
use crate::dataplane::attach::{self, attach_decap, detach_decap};
use crate::paths::{self, AttachPaths};

pub fn validate(path: &Path) -> anyhow::Result<ExitCode> {
    match Config::load(path) {
        Ok(c) => {
            for w in &c.warnings {
                eprintln!("{w}");
            }
            let backends: usize = c.vips.iter().map(|v| v.backends.len()).sum();
            let (vips, backends) =
                (counted(c.vips.len() as u64, "VIP", "VIPs"), counted(backends as u64, "backend", "backends"));
            println!("{}: ok ({vips}, {backends})", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `lb-ctl upgrade-check`: what a start of this build would do with the pins it finds.
pub fn upgrade_check(iface: &str, config: &Path, pin_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    use crate::dataplane::layout::{self, Action};
    let config = match Config::load(config) {
        Ok(c) => c,
        Err(e) => bail!("{} has mistakes:\n{e}", config.display()),
    };
    let paths = AttachPaths::balancer(iface, pin_dir, None);
    let dir = paths.pin_dir.display();
    let this = lb_common::layout::LAYOUT_VERSION;
    let plan = match layout::plan(&paths.pin_dir, config.daemon.ring_size, config.daemon.flow_table_size) {
        Ok(plan) => plan,
        Err(e) => {
            println!("refuse: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    if !plan.found() {
        println!("create: nothing is pinned in {dir}; a start makes every map (layout version {this})");
        return Ok(ExitCode::SUCCESS);
    }
    let mut versions: Vec<u32> = plan.recorded.values().copied().collect();
    versions.sort_unstable();
    versions.dedup();
    let found = match versions.is_empty() {
        true => "no recorded layout version".to_string(),
        false => format!("layout version {}", versions.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")),
    };
    println!("pins in {dir}: {found}; this build: layout version {this}");
    for (name, action) in &plan.maps {
        match action {
            Action::Reuse => println!("  reuse    {name}"),
            Action::Create => println!("  create   {name} (new in this build)"),
            Action::Migrate { from, what, .. } => println!("  migrate  {name} from version {from}: {what}"),
        }
    }
    let migrated = plan.migrations().len();
    match migrated {
        0 => println!("reuse: a start keeps every map as it is, and every connection"),
        n => println!(
            "migrate: a start copies {n} maps into this build's layout, swaps the program, and keeps every connection"
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// `lb-ctl export`: the configuration as a peer balancer's; a file with mistakes prints them
/// and nothing else.
pub fn export(format: ExportFormat, path: &Path) -> anyhow::Result<ExitCode> {
    let config = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    print!(
        "{}",
        match format {
            ExportFormat::Nft => export::nft(&config),
            ExportFormat::Ipvs => export::ipvs(&config),
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// Removes the pins and saved ids of a stopped daemon. `socket` is the daemon's control socket
/// when it is not the default one (`--socket`): a daemon still answering there is not detached.
pub fn detach(
    iface: &str,
    pin_dir: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    socket: Option<PathBuf>,
    announce_table: u32,
) -> anyhow::Result<()> {
    let socket = socket.unwrap_or_else(|| paths::api_socket(iface));
    if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
        bail!("the daemon on {iface} is running ({}); stop it first (systemctl stop lb-ctl@{iface})", socket.display());
    }
    let paths = AttachPaths::balancer(iface, pin_dir, state_dir);
    // A daemon on a control socket of its own (`api_socket`) is found by the lock it holds.
    if let Some(pid) = super::instance::running(&paths) {
        bail!(
            "the daemon on {iface} is running (pid {pid}, holding {}); stop it first (systemctl stop lb-ctl@{iface}), nothing was removed",
            paths.lock_file().display()
        );
    }
    let removed =
        attach::detach(&paths).with_context(|| format!("detaching from {iface} ({})", paths.pin_dir.display()))?;
    println!("{iface}: {removed} ({})", paths.pin_dir.display());
    // A daemon that did not stop cleanly (killed, crashed) left its VIP routes announced.
    // A worker thread drives the netlink connection while `KernelRoutes` blocks on its
    // requests through the handle (a current-thread runtime's handle cannot drive it).
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let mut routes = crate::announce::KernelRoutes::open(announce_table, runtime.handle().clone())
        .with_context(|| format!("reading routing table {announce_table}"))?;
    use crate::announce::Routes as _;
    let change = routes.apply(&Default::default()).map_err(anyhow::Error::msg)?;
    if !change.withdrawn.is_empty() {
        let list: Vec<String> = change.withdrawn.iter().map(|a| a.to_string()).collect();
        println!("{iface}: announced VIP routes withdrawn from table {announce_table}: {}", list.join(" "));
    }
    Ok(())
}

/// `lb-ctl backend-setup`: the script, a check of this host (exit 1 when something is
/// missing), or applying it.
pub fn backend_setup(args: &BackendSetupArgs) -> anyhow::Result<ExitCode> {
    use super::backend_setup::{apply, check, script};
    if args.check {
        let ok = check(&args.iface, &args.vip, &args.from, args.mode)?;
        return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    if args.apply {
        apply(&args.iface, &args.vip, &args.from, args.mode)?;
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", script(&args.iface, &args.vip, &args.from, args.mode));
    Ok(ExitCode::SUCCESS)
}

pub fn decap(command: DecapCommand) -> anyhow::Result<()> {
    match command {
        DecapCommand::Attach { iface, from, xdp_mode } => {
            let (mode, native_refused) = attach_decap(&iface, xdp_mode.into(), &from)
                .with_context(|| format!("attaching the decapsulator to {iface}"))?;
            if let Some(why) = native_refused {
                eprintln!("lb-ctl: warning: native XDP refused on {iface} ({why}); using skb mode");
            }
            println!(
                "decapsulator attached to {iface} ({})",
                if mode == aya::programs::XdpMode::Skb { "skb" } else { "native" }
            );
        }
        DecapCommand::Detach { iface } => {
            detach_decap(&iface).with_context(|| format!("detaching the decapsulator from {iface}"))?;
            println!("decapsulator detached from {iface}");
        }
    }
    Ok(())
}
