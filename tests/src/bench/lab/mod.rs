//! `cargo xtask bench lab` (root): packets and connections through a running balancer in the
//! namespace lab, next to the tools it replaces, interleaved in one run: every repetition runs
//! each workload through each peer in turn (A, B, C, A, B, C…), ratios are paired within a
//! repetition, and the summary gives medians and spreads. Every run records sent against
//! delivered, interface and backlog drops, per-CPU busy time and the balancer's counters, so
//! each figure says what limited it. Prints figures, asserts nothing.
use anyhow::{Result, bail};
use serde::Serialize;

use crate::lab;

mod observe;
pub mod peers;
pub mod profile;
pub mod report;
mod rig;
pub mod workloads;

use observe::Observed;
use peers::{PEERS, Peer};
use workloads::{WORKLOADS, Workload};

/// How long and how often.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Options {
    pub repetitions: usize,
    pub seconds: u64,
    /// RX and TX queues of the balancer's veth (and its switch port): 1 or 2.
    pub balancer_queues: usize,
    /// After the measured runs, one more run of each workload through lb-ctl (NAT) under a
    /// system-wide CPU profile.
    pub profile: bool,
}

impl Options {
    pub fn quick() -> Options {
        Options { repetitions: 1, seconds: 2, balancer_queues: 2, profile: false }
    }
}

/// One run: a workload through a peer, in one repetition.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub repetition: usize,
    pub workload: Workload,
    pub peer: Peer,
    /// The figure, in the workload's unit.
    pub value: f64,
    /// Packets, requests or bytes offered, and delivered.
    pub sent: f64,
    pub delivered: f64,
    pub observed: Observed,
}

/// Everything a lab run measured, for the report.
#[derive(Debug, Serialize)]
pub struct Results {
    pub options: Options,
    pub configs: Vec<(String, String)>,
    pub skipped: Vec<(String, String)>,
    pub runs: Vec<Run>,
    pub profiles: Vec<profile::Profile>,
}

pub fn run(options: Options) -> Result<Results> {
    anyhow::ensure!(crate::privileges::require_root("lb-bench lab"), "the lab benchmark needs root");
    crate::netns::set_run_prefix("lbb");
    lab::catch_ctrl_c();
    let rig = rig::Rig::build(options.balancer_queues)?;
    println!(
        "lab: client (8 addresses), balancer ({} queue(s)), {} backends on one bridge; {} CPUs shared by generator, balancer \
         and backends; {} repetition(s) of {} s per run",
        options.balancer_queues,
        rig::BACKENDS,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        options.repetitions,
        options.seconds
    );
    for (name, text) in &rig.configs {
        println!("--- {name} ---\n{}", text.trim_end());
    }
    let mut skipped = Vec::new();
    if let Some(why) = peers::ipvs_missing() {
        println!("IPVS: skipped: {why}");
        skipped.push(("IPVS".to_string(), why.to_string()));
    }
    let mut runs = Vec::new();
    for repetition in 1..=options.repetitions {
        for workload in WORKLOADS {
            for peer in PEERS.into_iter().filter(|p| workload != Workload::Udp || p.serves_udp()) {
                if lab::interrupted() {
                    bail!("interrupted (Ctrl-C)");
                }
                // A run whose generator fails (trafgen's TX ring can refuse a flush while the
                // lab settles) is tried once more, then reported as failed; the others go on.
                let what = format!("{} through {} (repetition {repetition})", workload.name(), peer.name());
                let run = match rig.measure(repetition, workload, peer, options.seconds) {
                    Ok(run) => run,
                    Err(first) => {
                        println!("{what}: {first:#}; trying once more");
                        workloads::settle();
                        match rig.measure(repetition, workload, peer, options.seconds) {
                            Ok(run) => run,
                            Err(e) => {
                                println!("{what}: failed again: {e:#}");
                                skipped.push((what, format!("failed twice: {e:#}")));
                                continue;
                            }
                        }
                    }
                };
                println!(
                    "rep {repetition} {:<26} {:<16} {:>12} {}  sent {:.0} delivered {:.0}  {}",
                    workload.name(),
                    peer.name(),
                    report::figure(run.value),
                    workload.unit(),
                    run.sent,
                    run.delivered,
                    run.observed.summary()
                );
                if !run.observed.balancer.is_empty() {
                    println!("      balancer counters: {:?}", run.observed.balancer);
                }
                runs.push(run);
                workloads::settle();
            }
        }
    }
    let mut profiles = Vec::new();
    for workload in WORKLOADS.into_iter().filter(|_| options.profile) {
        let what = format!("{} through {}", workload.name(), Peer::LbNat.name());
        let (run, profile) =
            profile::profile(&what, options.seconds, || rig.measure(0, workload, Peer::LbNat, options.seconds))?;
        // A profile is kept even when its run's generator failed (the CPUs were still busy).
        if let Err(e) = run {
            println!("{what} (profiled): {e:#}");
        }
        profile.print();
        profiles.push(profile);
        workloads::settle();
    }
    let results = Results { options, configs: rig.configs.clone(), skipped, runs, profiles };
    report::print_summary(&results);
    drop(rig);
    Ok(results)
}
