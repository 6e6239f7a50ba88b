//! `lb-ctl`: the daemon (`attach`, `proxy`) and the commands that talk to it over its control
//! socket. The command line is defined in `cli::args`; each command lives in `cli`.
//!
//! Exit codes: 0 success; 1 the daemon refused the request (unknown VIP, duplicate backend,
//! malformed address, weight out of range, reload with mistakes...) or the command failed;
//! 2 bad command line; 3 the daemon could not be reached.
use std::path::PathBuf;
use std::process::ExitCode;

use clap::FromArgMatches as _;
use lb_ctl::cli::args::{Cli, Command};
use lb_ctl::cli::{client, docs, fleet, local, start};

/// The daemon serves proxy VIPs in-process: glibc, with tokio's 128-byte aligned blocks cheap.
#[global_allocator]
static ALLOCATOR: lb_proxy::Allocator = lb_proxy::Allocator;

fn main() -> ExitCode {
    // The command line as its help shows it (`docs::command`).
    let cli = Cli::from_arg_matches(&docs::command().get_matches()).unwrap_or_else(|e| e.exit());
    if matches!(cli.command, Command::Attach(_) | Command::Proxy(_)) {
        // The daemon may serve proxy VIPs: glibc's per-thread cache sized for them.
        lb_proxy::restart_with_malloc_tuning();
    }
    let result = match cli.command {
        Command::Attach(args) => start::attach(args).map(|()| ExitCode::SUCCESS),
        Command::Proxy(args) => start::proxy(args, cli.socket).map(|()| ExitCode::SUCCESS),
        Command::Validate { config } => local::validate(&config),
        Command::Detach { iface, pin_dir, state_dir, announce_table } => {
            let socket = cli.socket.or_else(|| std::env::var_os("LB_CTL_SOCKET").map(PathBuf::from));
            local::detach(&iface, pin_dir, state_dir, socket, announce_table).map(|()| ExitCode::SUCCESS)
        }
        Command::UpgradeCheck { iface, config, pin_dir } => local::upgrade_check(&iface, &config, pin_dir),
        Command::Decap(command) => local::decap(command).map(|()| ExitCode::SUCCESS),
        Command::BackendSetup(args) => local::backend_setup(&args),
        Command::Export { format, config } => local::export(format, &config),
        Command::Fleet(command) => fleet::run(command),
        Command::Completions { shell } => docs::completions(shell).map(|()| ExitCode::SUCCESS),
        Command::Man { dir } => docs::man_pages(&dir).map(|()| ExitCode::SUCCESS),
        command => return client::client_command(cli.socket, cli.daemon_iface, command),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lb-ctl: {e:#}");
            ExitCode::FAILURE
        }
    }
}
