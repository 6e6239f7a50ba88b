//! The command line: every subcommand and flag, with its help text.
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ipnet::IpNet;

use crate::dataplane::load::AttachMode;

#[derive(Parser)]
#[command(name = "lb-ctl", version, about = "XDP load balancer: daemon and control commands")]
pub struct Cli {
    /// Control socket of the daemon to talk to (or $LB_CTL_SOCKET).
    #[arg(long, global = true)]
    pub socket: Option<PathBuf>,
    /// Interface whose daemon to talk to (its socket is /run/lb-ctl/IFACE.sock). Without this
    /// or --socket, the only daemon running is used.
    #[arg(long = "iface", short = 'i', global = true, value_name = "IFACE")]
    pub daemon_iface: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the balancer on IFACE in the foreground until SIGTERM/SIGINT (SIGHUP reloads).
    Attach(AttachArgs),
    /// Check a configuration file and print its mistakes (file:line), without touching anything.
    Validate {
        /// Configuration file to check (lb.toml, see lb.toml.example).
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
        /// Interface the balancer was attached to.
        iface: String,
        /// bpffs directory of the maps (default /sys/fs/bpf/lb-ctl/IFACE).
        #[arg(long)]
        pin_dir: Option<PathBuf>,
        /// Directory of the saved ids, as given to attach (default /run/lb-ctl).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// The routing table of the announced VIPs (`[daemon] announce_table`): its routes are
        /// withdrawn too, so routers stop sending this node traffic it no longer balances.
        #[arg(long, default_value_t = crate::config::DEFAULT_ANNOUNCE_TABLE)]
        announce_table: u32,
    },
    /// Say what `attach` of this build would do with the maps pinned for IFACE: reuse them,
    /// migrate the ones of an older layout (connections kept), or refuse. Changes nothing;
    /// exits 1 when a start would be refused.
    UpgradeCheck {
        /// Interface the balancer is attached to.
        iface: String,
        /// lb.toml the start would use (its ring_size and flow_table_size must match the pins).
        #[arg(long, short = 'c')]
        config: PathBuf,
        /// bpffs directory of the maps (default /sys/fs/bpf/lb-ctl/IFACE).
        #[arg(long)]
        pin_dir: Option<PathBuf>,
    },
    /// Backends of the VIPs.
    #[command(subcommand)]
    Backends(BackendsCommand),
    /// The VIPs.
    #[command(subcommand)]
    Vips(VipsCommand),
    /// The fleet's state in etcd (`[fleet]`): push a file's VIPs and backends, see what a
    /// push would change, and every node's applied revision and rings.
    #[command(subcommand)]
    Fleet(super::fleet::FleetCommand),
    /// This balancer as one node of several behind ECMP: drain withdraws every announced VIP
    /// (established flows keep being forwarded); undrain announces them again.
    #[command(subcommand)]
    Node(NodeCommand),
    /// The daemon's state at a glance.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Counters of the data plane, per VIP, per backend and per CPU (proxy VIPs: requests and
    /// errors).
    Stats {
        /// Print JSON instead of a table (with --watch: one JSON object of rates a line).
        #[arg(long)]
        json: bool,
        /// Print per-second rates (pps, bps, per VIP, backend and CPU, and the drop reasons
        /// that grew) every interval, until Ctrl-C.
        #[arg(long)]
        watch: bool,
        /// Seconds between samples with --watch (may be fractional: 0.5).
        #[arg(long, default_value = "1", requires = "watch", value_parser = parse_interval, value_name = "SECONDS")]
        interval: std::time::Duration,
        /// With --watch: stop after N samples.
        #[arg(long, requires = "watch", value_name = "N")]
        count: Option<u64>,
    },
    /// A live view of per-second rates per VIP, backend (with health) and CPU, and drops by
    /// reason; q quits.
    Top {
        /// Seconds between redraws (may be fractional: 0.5).
        #[arg(long, default_value = "1", value_parser = parse_interval, value_name = "SECONDS")]
        interval: std::time::Duration,
    },
    /// Watch the balancer decide live packets: one line per packet a filter matches (VIP,
    /// backend, table hit or ring slot, rewrite and next hop, or the drop/pass reason) until
    /// Ctrl-C or --count. The filter is removed when the command ends, however it ends.
    Trace(super::trace::TraceArgs),
    /// Which backend a flow from CLIENT would get, and why (connection table or ring slot).
    Explain {
        /// VIP name, ADDR:PORT[/PROTOCOL] or ADDR.
        vip: String,
        /// ADDR, or ADDR:PORT (the port is needed to check the connection table and for
        /// hash = "flow" VIPs); IPv6 as ADDR or [ADDR]:PORT, of the VIP's family.
        client: String,
        /// A QUIC destination connection ID in hex (as a packet capture shows it): the backend
        /// its server id routes to, on a VIP with quic.
        #[arg(long, value_name = "HEX")]
        quic_cid: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The DSR decapsulator for backends.
    #[command(subcommand)]
    Decap(DecapCommand),
    /// Run the userspace proxy for the proxy VIPs of a configuration.
    Proxy(ProxyArgs),
    /// What a DSR backend needs (the VIP on lo, ARP and reverse-path settings, the IPIP
    /// decapsulator): print it as a script (default), --check this host, or --apply it.
    BackendSetup(BackendSetupArgs),
    /// Print the same VIPs and backends as an nftables DNAT ruleset or ipvsadm commands (to set
    /// up a peer balancer from the same file); what the peer cannot do is said in comments.
    Export {
        /// nft (a ruleset for `nft -f`) or ipvs (ipvsadm commands).
        #[arg(value_enum)]
        format: ExportFormat,
        /// Configuration file to export (lb.toml).
        #[arg(long, short = 'c')]
        config: PathBuf,
    },
    /// Print the shell completion script for SHELL (e.g. `lb-ctl completions bash >
    /// /usr/share/bash-completion/completions/lb-ctl`).
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (lb-ctl.1, and lb-ctl-SUBCOMMAND.1 for each subcommand) into DIR,
    /// e.g. `lb-ctl man /usr/local/share/man/man1` (`cargo xtask install` installs them).
    Man {
        /// Directory to write the pages into (created if missing).
        dir: PathBuf,
    },
}

/// `lb-ctl proxy`: the proxy VIPs of a configuration, without XDP (and without root for
/// unprivileged ports). The same daemon: health checks, reload, the backends API.
#[derive(Args)]
pub struct ProxyArgs {
    /// Configuration file; every VIP in it must be a proxy VIP (protocol "http" or
    /// forwarding "proxy"). Or, without a file, the quick-start flags (--listen, --backend).
    #[arg(
        long,
        short = 'c',
        required_unless_present_any = ["listen", "backend", "backends_file"],
        conflicts_with = "listen"
    )]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub quick: QuickStart,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// A tracing filter: error, warn, info, debug, trace, or per module (lb_ctl=debug).
    /// Overrides `[daemon] log_level` (default info) for the process's life.
    #[arg(long, value_parser = parse_log_level)]
    pub log_level: Option<String>,
}

#[derive(Args)]
pub struct BackendSetupArgs {
    /// The backend's interface the tunnelled traffic arrives on.
    pub iface: String,
    /// A VIP this backend serves, IPv4 or IPv6 (repeatable).
    #[arg(long, required = true, value_name = "ADDR")]
    pub vip: Vec<std::net::IpAddr>,
    /// The balancers' encap_source addresses or prefixes (IPv4 or IPv6) the decapsulator
    /// accepts encapsulated packets from (repeatable; dsr-ipip and dsr-gue).
    #[arg(long = "from", value_name = "PREFIX", value_parser = parse_prefix)]
    pub from: Vec<IpNet>,
    /// The VIPs' forwarding: ipip or gue (`dsr-ipip`, `dsr-gue`: the decapsulator too), or l2
    /// (`dsr-l2`: this backend must be on the balancers' segment; nothing to decapsulate).
    #[arg(long, value_enum, default_value_t = DsrMode::Ipip)]
    pub mode: DsrMode,

    /// Check this host: print what holds and what is missing (exit 1 if anything is).
    #[arg(long, conflicts_with = "apply")]
    pub check: bool,
    /// Make it so on this host (root): run what is missing.
    #[arg(long)]
    pub apply: bool,
}

/// `lb-ctl proxy` without a file: one proxy VIP from flags.
#[derive(Args, Clone, Debug)]
#[command(group(clap::ArgGroup::new("backend_source").args(["backend", "backends_file"]).multiple(true)))]
pub struct QuickStart {
    /// Serve one proxy VIP on ADDR:PORT (HTTP; with --tcp, TCP), without a configuration file;
    /// a bare PORT listens on every IPv4 address (0.0.0.0:PORT; [::]:PORT for IPv6).
    #[arg(long, value_name = "ADDR:PORT", requires = "backend_source", value_parser = parse_listen)]
    pub listen: Option<std::net::SocketAddr>,
    /// A backend, HOST:PORT (repeatable); a name is resolved at start, each address a backend.
    #[arg(long, value_name = "HOST:PORT", requires = "listen")]
    pub backend: Vec<String>,
    /// A file of backends, one HOST:PORT a line (# comments); re-read when it changes.
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub backends_file: Option<PathBuf>,
    /// How requests are spread over the backends.
    #[arg(long, value_enum, default_value_t = QuickBalance::RoundRobin, requires = "listen")]
    pub balance: QuickBalance,
    /// Relay TCP connections instead of serving HTTP.
    #[arg(long, requires = "listen")]
    pub tcp: bool,
    /// Serve Prometheus metrics (and the status page) on ADDR:PORT.
    #[arg(long, value_name = "ADDR:PORT", requires = "listen")]
    pub metrics: Option<std::net::SocketAddr>,
}

/// `--balance` of the quick start.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum QuickBalance {
    /// Smooth weighted round robin (even shares).
    RoundRobin,
    /// Round robin by weight (all weights are equal here; kept for the familiar name).
    WeightedRoundRobin,
    /// The backend with the fewest requests in progress.
    LeastConnections,
    /// The less busy of two backends picked at random.
    PowerOfTwo,
    /// Consistent hashing on the client address (Maglev): a client sticks to a backend.
    IpHash,
}

#[derive(Args)]
pub struct AttachArgs {
    /// Network interface to balance on (the one VIP traffic arrives on).
    pub iface: String,
    /// lb.toml (see lb.toml.example): checked whole before anything is attached.
    #[arg(long, short = 'c')]
    pub config: PathBuf,
    /// native (driver), skb (generic), or auto: native, else skb with a warning saying why.
    #[arg(long, value_enum, default_value_t = XdpMode::Auto)]
    pub xdp_mode: XdpMode,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// A tracing filter: error, warn, info, debug, trace, or per module (lb_ctl=debug).
    /// Overrides `[daemon] log_level` (default info) for the process's life.
    #[arg(long, value_parser = parse_log_level)]
    pub log_level: Option<String>,
    /// bpffs directory to pin the maps in (default /sys/fs/bpf/lb-ctl/IFACE).
    #[arg(long)]
    pub pin_dir: Option<PathBuf>,
    /// Directory of the saved ids (default /run/lb-ctl).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Set net.ipv4.ip_forward=1 in this network namespace if it is off (NAT and DSR VIPs need
    /// it); without this flag, attach refuses to start with it off.
    #[arg(long)]
    pub enable_forwarding: bool,
    /// Test only: keep the maps in memory instead of loading the XDP program.
    #[arg(long, hide = true)]
    pub fake_dataplane: bool,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum XdpMode {
    /// Driver mode only.
    Native,
    /// Generic mode only.
    Skb,
    /// Native, falling back to skb with a warning.
    Auto,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DsrMode {
    /// forwarding = "dsr-ipip".
    Ipip,
    /// forwarding = "dsr-l2".
    L2,
    /// forwarding = "dsr-gue".
    Gue,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum ExportFormat {
    /// An nftables ruleset (table ip lb_ctl) with DNAT rules.
    Nft,
    /// ipvsadm commands.
    Ipvs,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line (for journald and log shippers).
    Json,
}

#[derive(Subcommand)]
pub enum BackendsCommand {
    /// Add a backend (it takes traffic once healthy).
    Add {
        /// VIP name, ADDR:PORT[/PROTOCOL] or ADDR.
        vip: String,
        /// ADDR:PORT, or ADDR for the VIP's port.
        address: String,
        /// Relative weight, 0-65535 (default 100).
        #[arg(long)]
        weight: Option<u64>,
    },
    /// Remove a backend: its flows move to other backends.
    Remove {
        /// VIP name, ADDR:PORT[/PROTOCOL] or ADDR.
        vip: String,
        /// The backend: ADDR:PORT, or ADDR for the VIP's port.
        address: String,
    },
    /// Drain a backend: no new flows, established ones stay.
    Drain {
        /// VIP name, ADDR:PORT[/PROTOCOL] or ADDR.
        vip: String,
        /// The backend: ADDR:PORT, or ADDR for the VIP's port.
        address: String,
    },
    /// Undo a drain: the backend takes new flows again (once healthy).
    Undrain {
        /// VIP name, ADDR:PORT[/PROTOCOL] or ADDR.
        vip: String,
        /// The backend: ADDR:PORT, or ADDR for the VIP's port.
        address: String,
    },
    /// Check each backend of a VIP from this balancer: directly (as health checks do) and
    /// along the data plane's own path (a TCP SYN to the VIP inside IP in IP or GUE from
    /// encap_source, or to the backend's MAC for dsr-l2), and say what is wrong. A DSR backend
    /// that answers only directly is misconfigured for DSR. Run as root on the balancer.
    Verify {
        /// VIP name, ADDR:PORT[/PROTOCOL] or ADDR.
        vip: String,
        /// How long to wait for each answer.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Backends with weight, health, state, traffic and active flows.
    List {
        /// Only this VIP's backends (name, ADDR:PORT[/PROTOCOL] or ADDR).
        vip: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum NodeCommand {
    /// Withdraw every announced VIP, keep forwarding (kept across reloads and restarts).
    Drain,
    /// Announce the VIPs again (each while it has enough healthy backends).
    Undrain,
}

#[derive(Subcommand)]
pub enum VipsCommand {
    /// The VIPs with their forwarding, health summary and traffic.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum DecapCommand {
    /// Attach the IPIP decapsulator to IFACE (on a DSR backend). It stays attached after this
    /// command exits (pinned under /sys/fs/bpf/lb-ctl/decap-IFACE).
    Attach {
        /// Interface of the DSR backend that receives the IPIP traffic.
        iface: String,
        /// Outer sources to accept encapsulated packets from: the balancers' `encap_source`
        /// addresses, IPv4 or IPv6, as ADDR or PREFIX/LEN; repeat for more (0.0.0.0/0 or ::/0
        /// accepts any source of that family). Packets from elsewhere are left to the stack,
        /// unopened.
        #[arg(long = "from", required = true, value_name = "PREFIX", value_parser = parse_prefix)]
        from: Vec<IpNet>,
        /// native (driver), skb (generic), or auto: native, else skb with a warning.
        #[arg(long, value_enum, default_value_t = XdpMode::Auto)]
        xdp_mode: XdpMode,
    },
    /// Detach it.
    Detach {
        /// Interface the decapsulator is attached to.
        iface: String,
    },
}

/// A `--log-level` checked when the command line is read: a filter that is not one is a
/// usage error (exit 2), not a daemon that starts and then prints nothing.
pub fn parse_log_level(text: &str) -> Result<String, String> {
    crate::config::log_level::check(text)
}

/// A `--interval` in seconds: positive, at most a day.
pub fn parse_interval(text: &str) -> Result<std::time::Duration, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.01..=86_400.0).contains(&s) => Ok(std::time::Duration::from_secs_f64(s)),
        _ => Err(format!("{text:?} is not a number of seconds between 0.01 and 86400 (like 1 or 0.5)")),
    }
}

/// A prefix (`198.51.100.0/24`, `2001:db8::/64`) or a single address (`198.51.100.1` as /32,
/// `2001:db8::fe` as /128).
pub fn parse_prefix(text: &str) -> Result<IpNet, String> {
    text.parse::<IpNet>().or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from)).map_err(|_| {
        format!("{text:?} is not an IP address or prefix (like 198.51.100.1, 198.51.100.0/24 or 2001:db8::/64)")
    })
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

/// `--listen`: `ADDR:PORT`, or a bare `PORT` (as the small balancers take it), which listens
/// on every IPv4 address (`0.0.0.0:PORT`, as HAProxy's `bind :PORT`); `[::]:PORT` is every
/// IPv6 address.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let port = text.strip_prefix(':').unwrap_or(text);
    match port.parse::<u32>() {
        Ok(p @ 1..=65535) => Ok(SocketAddr::from(([0, 0, 0, 0], p as u16))),
        Ok(p) => Err(format!("port {p} is out of range (1-65535)")),
        Err(_) => Err(format!(
            "{text:?} is not ADDR:PORT or PORT (e.g. 127.0.0.1:8080, [::]:8080, or 8080 for every IPv4 address)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    /// Every subcommand and every argument says what it is for in `--help`.
    #[test]
    fn every_subcommand_and_argument_has_help() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(sub_path.clone());
                }
                walk(sub, &sub_path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "lb-ctl", &mut missing);
        assert!(missing.is_empty(), "without help text: {missing:#?}");
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_bad_log_level_is_a_usage_error() {
        let err = Cli::try_parse_from(["lb-ctl", "proxy", "-c", "x.toml", "--log-level", "lb_ctl=loud"])
            .err()
            .expect("a bad level must not parse");
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("--log-level"), "{err}");
        assert!(Cli::try_parse_from(["lb-ctl", "proxy", "-c", "x.toml", "--log-level", "lb_ctl=debug,warn"]).is_ok());
    }
}
