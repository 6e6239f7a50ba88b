//! `cargo xtask bench ...`
use clap::Subcommand;

mod dataplane;
mod proxy;

#[derive(Subcommand)]
pub enum Bench {
    /// ns per packet of each XDP path, over a bare XDP_PASS measured in the same run (root).
    Dataplane,
    /// lb-proxy against nginx and HAProxy with wrk, same backends, same run.
    Proxy,
}

pub fn run(what: Bench) -> anyhow::Result<()> {
    match what {
        Bench::Dataplane => dataplane::run(),
        Bench::Proxy => proxy::run(),
    }
}
