//! The benchmarks (`cargo xtask bench …` runs this): each prints figures and asserts nothing.
use clap::{Parser, Subcommand};
use lb_tests::bench;

#[derive(Parser)]
#[command(about = "lb-ctl benchmarks: print figures, assert nothing")]
struct Cli {
    #[command(subcommand)]
    what: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// ns per packet of each XDP path, over a bare XDP_PASS measured in the same run (root).
    Dataplane,
    /// lb-proxy against nginx and HAProxy with wrk, same backends, same run.
    Proxy,
    /// `backends remove` to the map change, Maglev ring build, daemon RSS (root).
    Control,
    /// The proxy benchmark's backends (started by `proxy`).
    #[command(hide = true)]
    ProxyBackend { args: Vec<String> },
    /// The proxy benchmark's lb-proxy front end (started by `proxy`).
    #[command(hide = true)]
    ProxyFrontend { args: Vec<String> },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().what {
        Bench::Dataplane => bench::dataplane::run(),
        Bench::Proxy => bench::proxy::run(),
        Bench::Control => bench::control::run(),
        Bench::ProxyBackend { args } => {
            bench::proxy::backend::run(&args);
            Ok(())
        }
        Bench::ProxyFrontend { args } => {
            bench::proxy::frontend::run(&args);
            Ok(())
        }
    }
}
