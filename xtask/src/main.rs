//! `cargo xtask <task>`: the project's commands. See README.md.
use clap::{Parser, Subcommand};

mod bench;
mod demo;
mod fuzz;
mod install;
mod package;
mod setup;
mod soak;
mod test;
mod util;

#[derive(Parser)]
#[command(about = "lb-ctl project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Make this machine ready to build and test (idempotent): nightly rust-src, bpf-linker,
    /// and the Debian packages the tests use.
    Setup,
    /// Run every suite: unit, golden packets, end to end (root ones need root).
    Test,
    /// The lab demo: a namespace lab with a client, the balancer and three backends (root).
    /// `demo cluster`: four balancer nodes behind a BIRD router with ECMP and BFD.
    Demo {
        /// `cluster` for the scale-out demo; nothing for the single-balancer one.
        which: Option<String>,
    },
    /// The data-plane fuzz step: seeded random and mutated frames through lb_ingress with
    /// BPF_PROG_TEST_RUN; fails at the first aborted, altered or malformed frame (root).
    Fuzz {
        /// Frames to send.
        #[arg(default_value_t = 1_000_000)]
        frames: u64,
        /// Generator seed (hex); the default is fixed, so runs repeat.
        seed: Option<String>,
    },
    /// Benchmarks: print figures, assert nothing. `bench help` lists them (dataplane, proxy,
    /// control, flows, lab, all); the arguments go to `lb-bench`.
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Install lb-ctl (release build), its systemd units, completions, man pages and example
    /// configuration; or remove exactly what an install put there.
    Install {
        /// Install under DIR (units in DIR/lib/systemd/system, configuration in DIR/etc/lb-ctl)
        /// instead of /usr/local (units in /etc/systemd/system, configuration in /etc/lb-ctl).
        #[arg(long, value_name = "DIR")]
        prefix: Option<std::path::PathBuf>,
        /// Remove what the install with this prefix put there.
        #[arg(long)]
        uninstall: bool,
    },
    /// Build target/debian/lb-ctl_VERSION_ARCH.deb holding the same files (for /usr).
    Package,
    /// The soak run (root): the namespace lab under every load and fault at once for N
    /// minutes, sampling the daemon's resources; fails if one grows without bound or a
    /// connection to a healthy backend breaks. Report in target/soak-report.md.
    Soak {
        /// How long to run.
        #[arg(long, default_value_t = 60)]
        minutes: u64,
        /// Seed of the fault schedule (the same seed, the same schedule).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::Setup => setup::run(),
        Task::Test => test::run(),
        Task::Demo { which } => demo::run(which.as_deref()),
        Task::Fuzz { frames, seed } => fuzz::run(frames, seed),
        Task::Bench { args } => bench::run(&args),
        Task::Install { prefix, uninstall } => install::run(prefix, uninstall),
        Task::Package => package::run(),
        Task::Soak { minutes, seed } => soak::run(minutes, seed),
    }
}
