//! Commands that talk to a running daemon over its control socket.
use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::args::{BackendsCommand, Command, NodeCommand, VipsCommand};
use super::{rates, render};
use crate::api::client::{Client, ClientError};
use crate::api::types::{BackendRequest, ExplainRequest};
use crate::paths;

/// The socket to talk to: --socket, $LB_CTL_SOCKET, --iface, or the only one in the run directory
/// of this network namespace.
pub fn find_socket(socket: Option<PathBuf>, iface: Option<String>) -> Result<PathBuf, String> {
    if let Some(s) = socket.or_else(|| std::env::var_os("LB_CTL_SOCKET").map(PathBuf::from)) {
        return Ok(s);
    }
    if let Some(i) = iface {
        return Ok(paths::api_socket(&i));
    }
    // Root's daemons are in the run directory; a user's own `lb-ctl proxy` in the user's.
    let dir = paths::user_run_dir().unwrap_or_else(|| PathBuf::from(paths::RUN_DIR));
    let dir = dir.as_path();
    let sockets: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| paths::is_own_socket(p)).collect())
        .unwrap_or_default();
    match sockets.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(format!(
            "no daemon socket in {} (is `lb-ctl attach` running? or give --iface / --socket)",
            dir.display()
        )),
        _ => {
            Err(format!("several daemons run ({} sockets in {}): pick one with --iface", sockets.len(), dir.display()))
        }
    }
}

pub fn client_command(socket: Option<PathBuf>, iface: Option<String>, command: Command) -> ExitCode {
    if matches!(command, Command::Top { .. }) && !std::io::stdout().is_terminal() {
        eprintln!("lb-ctl: top needs a terminal; `lb-ctl stats --watch` streams the same rates");
        return ExitCode::FAILURE;
    }
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
    let result = match command {
        Command::Top { interval } => super::top::run(&client, &runtime, interval).map(|()| String::new()),
        Command::Trace(args) => runtime.block_on(super::trace::run(&client, args)).map(|()| String::new()),
        Command::Stats { watch: true, json: as_json, interval, count } => {
            runtime.block_on(watch_stats(&client, as_json, interval, count)).map(|()| String::new())
        }
        Command::Backends(BackendsCommand::Verify { vip, timeout, json: as_json }) => {
            // Exits 1 when a backend fails, after printing every result.
            return match runtime.block_on(super::verify::run(&client, &vip, timeout)) {
                Ok(results) => {
                    print!("{}", if as_json { json(&results) } else { super::verify::render(&results) });
                    if results.iter().all(|r| r.ok) { ExitCode::SUCCESS } else { ExitCode::FAILURE }
                }
                Err(e) => {
                    eprintln!("lb-ctl: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        command => runtime.block_on(run_client(&client, command)),
    };
    match result {
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

/// `stats --watch`: a sample every `interval`, printed as it comes, `count` times or until
/// interrupted. Rates are measured over the time between the two reads, not the nominal interval.
async fn watch_stats(c: &Client, as_json: bool, interval: Duration, count: Option<u64>) -> Result<(), ClientError> {
    let mut before = c.stats().await?;
    let mut read_at = Instant::now();
    let mut ticker = tokio::time::interval_at((read_at + interval).into(), interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut samples = 0u64;
    while count.is_none_or(|n| samples < n) {
        ticker.tick().await;
        let after = c.stats().await?;
        let now = Instant::now();
        let r = rates::rates(&before, &after, now.duration_since(read_at).as_secs_f64());
        let text = if as_json {
            serde_json::to_string(&r).expect("rates serialize") + "\n"
        } else {
            render::rates(&humantime::format_rfc3339_seconds(SystemTime::now()).to_string(), &r)
        };
        let mut out = std::io::stdout().lock();
        // A closed pipe (`| head`) ends the watch quietly.
        if out.write_all(text.as_bytes()).and_then(|()| out.flush()).is_err() {
            return Ok(());
        }
        (before, read_at) = (after, now);
        samples += 1;
    }
    Ok(())
}

fn json(value: &impl Serialize) -> String {
    serde_json::to_string_pretty(value).expect("API answers serialize") + "\n"
}

async fn run_client(c: &Client, command: Command) -> Result<String, ClientError> {
    let req = |vip: String, address: String, weight: Option<u64>| BackendRequest { vip, address, weight };
    Ok(match command {
        Command::Reload => format!("reloaded: {}\n", c.reload().await?.message),
        Command::Node(node) => c.node(matches!(node, NodeCommand::Drain)).await?.message + "\n",
        Command::Backends(BackendsCommand::Add { vip, address, weight }) => {
            c.add_backend(&req(vip, address, weight)).await?.message + "\n"
        }
        Command::Backends(BackendsCommand::Remove { vip, address }) => {
            c.remove_backend(&req(vip, address, None)).await?.message + "\n"
        }
        Command::Backends(BackendsCommand::Drain { vip, address }) => {
            c.drain_backend(&req(vip, address, None)).await?.message + "\n"
        }
        Command::Backends(BackendsCommand::Undrain { vip, address }) => {
            c.undrain_backend(&req(vip, address, None)).await?.message + "\n"
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
        Command::Stats { json: as_json, .. } => {
            let s = c.stats().await?;
            if as_json { json(&s) } else { render::stats(&s) }
        }
        Command::Explain { vip, client, quic_cid, json: as_json } => {
            let e = c.explain(&ExplainRequest { vip, client, quic_cid }).await?;
            if as_json { json(&e) } else { render::explain(&e) }
        }
        Command::Backends(BackendsCommand::Verify { .. })
        | Command::Attach(_)
        | Command::Validate { .. }
        | Command::Detach { .. }
        | Command::UpgradeCheck { .. }
        | Command::Decap(_)
        | Command::BackendSetup(_)
        | Command::Proxy { .. }
        | Command::Export { .. }
        | Command::Fleet(_)
        | Command::Top { .. }
        | Command::Trace(_)
        | Command::Completions { .. }
        | Command::Man { .. } => unreachable!("handled without the daemon"),
    })
}
