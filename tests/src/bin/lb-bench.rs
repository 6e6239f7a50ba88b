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
    Dataplane {
        /// Rounds (every row of both families runs once in each).
        #[arg(long, default_value_t = 31)]
        rounds: usize,
        /// Only the rows whose name contains one of these comma-separated strings (of both
        /// families): to profile a few paths.
        #[arg(long)]
        only: Option<String>,
        /// A Katran checkout with its BPF programs built by Katran's own build (or its
        /// balancer.bpf.o): Katran runs beside lb_ingress on the same frames.
        #[arg(long)]
        katran: Option<std::path::PathBuf>,
        /// Sample the rows with perf (cpu-clock) and print where lb_ingress and lb_ingress_v6
        /// spent their time, by source line.
        #[arg(long)]
        profile: bool,
        /// Another build's lb_ingress object (lb-ctl's build output `lb-ingress`): run beside
        /// this build's on the same rows with maps of its own, "B / ours" paired by round.
        #[arg(long)]
        against: Option<std::path::PathBuf>,
        /// Programs take turns within a row in blocks of all its calls (each runs warm, as a
        /// host's one balancer does) instead of call by call (each after the others' last call).
        #[arg(long)]
        in_blocks: bool,
    },
    /// ns per packet of an established flow as the flows grow from 1 to 1,000,000, beside the
    /// floor: one read of the flow's set alone (root).
    Flows {
        /// A Katran checkout with its BPF programs built (or its balancer.bpf.o): Katran runs
        /// the same flows with a connection table of the same capacity.
        #[arg(long)]
        katran: Option<std::path::PathBuf>,
        /// Another build's lb_ingress object: run beside this build's on the same flows with
        /// tables of its own, "B / ours" paired by round.
        #[arg(long)]
        against: Option<std::path::PathBuf>,
        /// Where the time goes at one count of flows (1000, 10000, ...): samples lb_ingress by
        /// source line while that count runs in the million-flow table, ten times the rounds.
        #[arg(long, value_name = "FLOWS")]
        profile: Option<u32>,
        /// Programs take turns in blocks of 100,000 calls (each runs with its own memory cached,
        /// as a host's one balancer does), not call by call.
        #[arg(long)]
        in_blocks: bool,
    },
    /// lb-proxy against nginx and HAProxy with wrk, same backends, same run.
    Proxy {
        /// Count user-space instructions per request of each peer instead (callgrind).
        #[arg(long, conflicts_with = "syscalls")]
        instructions: bool,
        /// Also count each peer's system calls per request (perf stat on its processes; the
        /// counter costs the peers a little on every call, so CPU figures of such a run are
        /// not the ones to quote).
        #[arg(long)]
        syscalls: bool,
    },
    /// Established connections kept and broken under a spoofed-SYN flood with a backend added
    /// mid-flood: lb-ctl with 1 Ki and 256 Ki connection tables, and nftables DNAT (root).
    Flood {
        /// One short pass: 4 s runs, unpaced flood only.
        #[arg(long)]
        quick: bool,
    },
    /// `backends remove` to the map change, Maglev ring build, daemon RSS (root).
    Control,
    /// Scale-out: the router's failover after a node crash (BFD on and off) and a node drain,
    /// with connections broken, in the cluster lab (root, BIRD 2).
    Cluster {
        /// Repetitions of each row (interleaved).
        #[arg(long, default_value_t = 3)]
        repetitions: usize,
    },
    /// A fleet (etcd on loopback, in-memory maps): `backends add` on one node until every node
    /// has it, and a node restarted after missing a change until it serves it (also the end
    /// of `cluster`).
    Fleet,
    /// Packets and connections through lb-ctl, nftables DNAT, HAProxy and nginx in the
    /// namespace lab, interleaved, with plain routing as the floor (root).
    Lab {
        /// One short repetition (2 s runs).
        #[arg(long)]
        quick: bool,
        /// Repetitions of every run (interleaved A,B,C,A,B,C).
        #[arg(long, default_value_t = 3)]
        repetitions: usize,
        /// Seconds per run.
        #[arg(long, default_value_t = 3)]
        seconds: u64,
        /// RX/TX queues of the balancer's veth and its switch port (1 or 2).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=2))]
        balancer_queues: u16,
        /// Then profile one run of each workload through lb-ctl (perf, cpu-clock, all CPUs).
        #[arg(long)]
        profile: bool,
        /// Also write every run as JSON to this file.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// Every benchmark, then an HTML report with charts and the raw results as JSON (root).
    All {
        /// The report's directory (report.html, results.json).
        #[arg(long)]
        report: std::path::PathBuf,
        /// The lab benchmark's short pass (one repetition of 2 s runs).
        #[arg(long)]
        quick: bool,
    },
    /// The proxy benchmark's backends (started by `proxy`).
    #[command(hide = true)]
    ProxyBackend { args: Vec<String> },
    /// The proxy benchmark's lb-proxy front end (started by `proxy`).
    #[command(hide = true)]
    ProxyFrontend { args: Vec<String> },
}

/// The proxy benchmark's front end is lb-proxy as the daemon runs it, allocator included.
#[global_allocator]
static ALLOCATOR: lb_proxy::Allocator = lb_proxy::Allocator;

fn main() -> anyhow::Result<()> {
    match Cli::parse().what {
        Bench::Dataplane { rounds, only, katran, profile, against, in_blocks } => {
            let options = bench::dataplane::Options { rounds, only, katran, profile, against, in_blocks };
            bench::dataplane::run_with(&options).map(drop)
        }
        Bench::Flows { katran, against, profile, in_blocks } => {
            bench::flows::run(katran.as_deref(), against.as_deref(), profile, in_blocks).map(drop)
        }
        Bench::Proxy { instructions: true, .. } => bench::proxy::instructions::run(),
        Bench::Proxy { instructions: false, syscalls } => bench::proxy::run_counting(syscalls).map(drop),
        Bench::Control => bench::control::run(),
        Bench::Cluster { repetitions } => bench::cluster::run(repetitions.max(1)),
        Bench::Fleet => bench::fleet::run(),
        Bench::Flood { quick } => {
            let options = if quick { bench::flood::Options::quick() } else { bench::flood::Options::default() };
            bench::flood::run(options).map(drop)
        }
        Bench::Lab { quick, repetitions, seconds, balancer_queues, profile, json } => {
            let mut options = if quick {
                bench::lab::Options::quick()
            } else {
                bench::lab::Options {
                    repetitions: repetitions.max(1),
                    seconds: seconds.clamp(1, 60),
                    balancer_queues: 2,
                    profile,
                }
            };
            options.balancer_queues = balancer_queues.into();
            options.profile = profile;
            let results = bench::lab::run(options)?;
            if let Some(path) = json {
                std::fs::write(&path, serde_json::to_string_pretty(&results)?)?;
                println!("runs written to {}", path.display());
            }
            Ok(())
        }
        Bench::All { report, quick } => {
            let options = if quick {
                bench::lab::Options { profile: true, ..bench::lab::Options::quick() }
            } else {
                bench::lab::Options { repetitions: 3, seconds: 3, balancer_queues: 2, profile: true }
            };
            bench::report::run_all(&report, options)
        }
        Bench::ProxyBackend { args } => {
            bench::proxy::backend::run(&args);
            Ok(())
        }
        Bench::ProxyFrontend { args } => {
            // As the daemon starts.
            lb_proxy::restart_with_malloc_tuning();
            bench::proxy::frontend::run(&args);
            Ok(())
        }
    }
}
