//! `cargo xtask bench ...`
use clap::Subcommand;

mod control;
mod cpu;
mod dataplane;
mod proxy;

#[derive(Subcommand)]
pub enum Bench {
    /// ns per packet of each XDP path, over a bare XDP_PASS measured in the same run (root).
    Dataplane,
    /// lb-proxy against nginx and HAProxy with wrk, same backends, same run.
    Proxy,
    /// Control plane: `backends remove` to the map change, Maglev ring build for 1000
    /// backends, daemon RSS with the full VIP x backend table (root).
    Control,
}

pub fn run(what: Bench) -> anyhow::Result<()> {
    match what {
        Bench::Dataplane => dataplane::run(),
        Bench::Proxy => proxy::run(),
        Bench::Control => control::run(),
    }
}
