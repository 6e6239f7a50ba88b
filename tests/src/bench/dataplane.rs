//! Data-plane benchmark (`cargo xtask bench dataplane`, root): ns per packet of each path of
//! lb_ingress and the extra over a bare XDP_PASS program measured in the same run.
//!
//! Method: kernel run-time statistics on (BPF_ENABLE_STATS), many single BPF_PROG_TEST_RUN calls
//! alternating the bare program and ours call by call, each one's run_time_ns / run_cnt per
//! round, medians over rounds. Single runs, because with repeat > 1 the kernel does not reset
//! the packet and a rewriting path would time its own output. For the new-flow path the flow
//! is deleted between calls, outside the timed region.
//!
//! With `--katran DIR` Katran's balancer (built in that checkout by Katran's own build) runs too,
//! configured for the same IPv4 VIPs and backends, on the same frames, called after lb_ingress
//! in the same loop: its extra over the same bare calls, and Katran / ours paired by round.
//! Katran forwards every VIP by IPIP: its one SYN path stands beside both our NAT and DSR SYNs,
//! its established path beside our NAT and IPIP rows. Its new-flow rows forget the flow from
//! this CPU's connection table between calls, as ours do. The process is pinned to one CPU.
//!
//! Flow protection is on for every row: the new-flow budget is checked on every table miss
//! (set to u32::MAX so it is never spent, except in the row that measures a spent budget), and
//! the first-packet rows run into a set with free ways unless the row says otherwise.
use crate::fixture::{CLIENT, SEED, balancer, balancer_of, configure, vips};
use crate::netns::ifindex;
use crate::packets::{Frame, L4};
use crate::testrun::{action_name, run_xdp};
use anyhow::Context as _;
use aya::maps::{Array, MapData};
use aya::programs::Xdp;
use aya::sys::{Stats, enable_stats};
use lb_common::config::DataplaneConfig;
use lb_common::flow::{FLOW_WAYS, FlowKey, FlowSet, ForwardSet, ReverseSet};
use lb_common::trace::{TraceControl, TraceFilter};
use lb_common::{family, ip_proto, ipv4_bytes, map_names, program_names};
use lb_ctl::dataplane::Dataplane as _;
use lb_ctl::dataplane::load::{load_decap, program};

const ROUNDS: usize = 31;
/// Katran's connection table on the benchmark's CPU: the fixture balancer's size.
const KATRAN_TABLE: u32 = crate::fixture::FLOW_TABLE;
const CALLS_PER_ROUND: usize = 2000;

pub(super) struct Path {
    pub(super) name: &'static str,
    pub(super) frame: Vec<u8>,
    pub(super) action: u32,
    /// Flow to forget before each call (new-flow paths): the FLOWS set of its key and, for
    /// NAT, the REVERSE_FLOWS set of its reply's key. Those sets are emptied.
    pub(super) forget: Option<(u32, Option<u32>)>,
    pub(super) target: Option<f64>,
    /// Katran runs this row's frame too (when it is loaded).
    pub(super) katran: bool,
    /// `DataplaneConfig::new_flow_budget` while this row runs.
    pub(super) budget: u32,
    /// `DataplaneConfig::share_flows` while this row runs (recorded flows are reported).
    pub(super) share: bool,
    /// A trace runs while this row does (`lb-ctl trace`): a filter that matches no packet of
    /// the benchmark (another client), so the row shows what a trace costs the packets it does
    /// not show. Rows without it run with tracing off.
    pub(super) trace: bool,
}

/// No budget limit in practice, but the budget is checked.
pub(super) const UNSPENT: u32 = u32::MAX;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

pub(crate) fn ns_per_run(prog: &Xdp, before: &mut (u64, u64)) -> f64 {
    let info = prog.info().expect("program info");
    let now = (info.run_time().as_nanos() as u64, info.run_count());
    let per = (now.0 - before.0) as f64 / (now.1 - before.1).max(1) as f64;
    *before = now;
    per
}

/// The lb_ingress object of another build, read for the rest of the run, to measure beside this
/// build's ("B / ours").
pub(super) fn against_object(path: &std::path::Path) -> anyhow::Result<&'static [u8]> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    println!("against: {} (\"B\"), beside this build (\"ours\")", path.display());
    Ok(Box::leak(bytes.into_boxed_slice()))
}

/// Fits B's maps to an object built before CONFIG named the tables' hash (layout version 4):
/// such a program hashes its tables with `table_hash::kind::CHAINED` only, and reads the kind's
/// byte as part of `share_flows`. Its BTF then lacks the field's name.
pub(super) fn fit_older_object(dp: &mut lb_ctl::dataplane::aya::AyaDataplane, object: &[u8]) -> anyhow::Result<()> {
    if object.windows(b"table_hash_kind".len()).any(|w| w == b"table_hash_kind") {
        return Ok(());
    }
    println!("against: built before the table hash's kind (layout version 4): its tables hash as it did then");
    Ok(dp.hash_tables_as(lb_common::table_hash::kind::CHAINED)?)
}

/// Empties connection-table set `set`.
fn forget<V: Copy + Default>(table: &mut Array<MapData, FlowSet<V>>, set: &u32) -> anyhow::Result<()>
where
    FlowSet<V>: aya::Pod,
{
    table.set(*set, FlowSet::default(), 0)?;
    Ok(())
}

/// One path's figure: extra ns per packet over the bare program (median), and Katran's for the
/// same frames in the same run (when it ran).
#[derive(Clone, Debug, serde::Serialize)]
pub struct PathCost {
    pub path: String,
    pub extra_ns: f64,
    pub katran_ns: Option<f64>,
}

/// What `bench dataplane` runs: rounds of every row, and which rows.
#[derive(Clone, Debug)]
pub struct Options {
    pub rounds: usize,
    /// Only the rows whose name contains one of these comma-separated strings (either
    /// family's rows), to profile a few paths.
    pub only: Option<String>,
    /// A Katran checkout with its BPF programs built (or its balancer.bpf.o): Katran runs too.
    pub katran: Option<std::path::PathBuf>,
    /// Sample the rows with `perf` and print where lb_ingress spent its time, by source line.
    pub profile: bool,
    /// Another build's lb_ingress object (`lb-ingress` in lb-ctl's build output), loaded with
    /// maps of its own and run beside this build's on the same rows: an A/B of two builds in
    /// one run, paired by round, which a shared host's phases do not skew as two runs would.
    pub against: Option<std::path::PathBuf>,
    /// How the programs take turns within a row of a round: call by call (each program runs
    /// with the caches the others' last call left), or in blocks of all the row's calls of one
    /// program, then the next (each runs warm, as a host's one balancer does).
    pub in_blocks: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options { rounds: ROUNDS, only: None, katran: None, profile: false, against: None, in_blocks: false }
    }
}

/// Every path of both families, each family in a balancer of its own in one namespace, the
/// rows of both measured in turn within every round (so a slow phase of the host hits the
/// IPv4 and the IPv6 rows alike); then the ratios the targets are stated in, paired by round.
pub fn run() -> anyhow::Result<Vec<PathCost>> {
    run_with(&Options::default())
}

pub fn run_with(options: &Options) -> anyhow::Result<Vec<PathCost>> {
    anyhow::ensure!(unsafe { libc::geteuid() } == 0, "the data-plane benchmark needs root");
    // lab6 is the IPv4 lab with IPv6 addresses, neighbours and routes added.
    let katran_object = options.katran.as_deref().map(super::katran::object_in).transpose()?;
    let ns = crate::fixture6::lab6();
    let _inside = ns.enter();
    let cpu = crate::testrun::pin_to_this_cpu()?;
    let g0 = ifindex("g0");
    let mut decap = load_decap()?;
    let bare: &Xdp = program(&mut decap, program_names::PASS)?;
    let mut dp4 = balancer();
    let mut dp6 = balancer();
    let rows4 = ipv4_rows(&mut dp4)?;
    let rows6 = super::dataplane6::ipv6_rows(&mut dp6)?;
    let ours4: &Xdp = program(dp4.ebpf_mut(), program_names::INGRESS)?;
    let ours6: &Xdp = program(dp6.ebpf_mut(), program_names::INGRESS)?;
    // The build measured against this one: its own maps, filled as ours.
    let against_object = options.against.as_deref().map(against_object).transpose()?;
    let against = |object: &'static [u8]| -> anyhow::Result<_> {
        let mut dp = balancer_of(Some(object), false);
        fit_older_object(&mut dp, object)?;
        Ok(dp)
    };
    let mut b4 = against_object.map(against).transpose()?;
    let mut b6 = against_object.map(against).transpose()?;
    let b_rows4 = b4.as_mut().map(ipv4_rows).transpose()?;
    let b_rows6 = b6.as_mut().map(super::dataplane6::ipv6_rows).transpose()?;
    let b4: Option<&Xdp> =
        b4.as_mut().map(|dp| program(dp.ebpf_mut(), program_names::INGRESS)).transpose()?.map(|p| &*p);
    let b6: Option<&Xdp> =
        b6.as_mut().map(|dp| program(dp.ebpf_mut(), program_names::INGRESS)).transpose()?.map(|p| &*p);
    let keep = |p: &Path| options.only.as_deref().is_none_or(|only| only.split(',').any(|o| p.name.contains(o)));
    let warmed = |mut rows: Rows, program: &Xdp| {
        for frame in &rows.warm {
            run_xdp(program, frame, g0);
        }
        rows.paths.retain(keep);
        rows
    };
    let mut groups = [(rows4, ours4, b_rows4.zip(b4)), (rows6, ours6, b_rows6.zip(b6))].map(|(rows, ours, against)| {
        Group { rows: warmed(rows, ours), ours, against: against.map(|(rows, b)| (warmed(rows, b), b)) }
    });
    let mut katran = match &katran_object {
        Some(object) => {
            println!("Katran: {}, on CPU {cpu}", object.display());
            Some(super::katran::Katran::load(object, cpu, KATRAN_TABLE)?)
        }
        None => None,
    };
    let katran = katran.as_mut().map(|k| k.parts()).transpose()?;
    let sampler = options.profile.then(|| super::line_profile::Sampler::start(cpu)).transpose()?;
    if options.in_blocks {
        println!(
            "turns: in blocks of {CALLS_PER_ROUND} calls of one program, then the next (bare, then ours and the others, their order reversed every other round)"
        );
    }
    let turns = Turns { rounds: options.rounds.max(1), in_blocks: options.in_blocks };
    let results = measure(&mut groups, bare, katran, g0, turns)?;
    if let Some(sampler) = sampler {
        let samples = sampler.stop()?;
        samples.report(groups[0].ours, program_names::INGRESS)?;
        samples.report(groups[1].ours, program_names::INGRESS_V6)?;
    }
    report_ratios(&results);
    if options.only.as_deref().is_none_or(|only| only.contains("told")) {
        super::messages::run(bare, g0, options.rounds.max(1))?;
    }
    Ok(results.into_iter().map(|r| r.cost).collect())
}

/// The pairs the targets compare: (numerator row, denominator row, what, target).
const RATIOS: [(&str, &str, &str, &str); 3] = [
    (super::dataplane6::ESTABLISHED_NAT66, "established TCP (NAT)", "established TCP (NAT)", "target <= 1.15x"),
    (
        super::dataplane6::ESTABLISHED_IP6IP6,
        "IPIP encapsulation (DSR)",
        "established DSR by IP in IP",
        "target <= 1.15x",
    ),
    (super::dataplane6::ESTABLISHED_GUE6, "GUE encapsulation (DSR)", "established DSR by GUE", "no target"),
];
const DIFFERENCES: [(&str, &str, &str); 2] = [
    ("GUE encapsulation (DSR)", "IPIP encapsulation (DSR)", "GUE - IPIP, established (IPv4)"),
    (super::dataplane6::ESTABLISHED_GUE6, super::dataplane6::ESTABLISHED_IP6IP6, "GUE - IP in IP, established (IPv6)"),
];

/// The ratios and differences of rows, each taken round by round (both rows of a pair ran in
/// the same round, moments apart), then the median over rounds and the middle half's range.
fn report_ratios(results: &[RowResult]) {
    let rounds = |name: &str| results.iter().find(|r| r.cost.path == name).map(|r| &r.extra_by_round);
    println!(
        "Pairs, per round (both rows measured in the same round), median [25%..75%] of {} rounds:",
        results.first().map_or(0, |r| r.extra_by_round.len())
    );
    for (v6, v4, what, target) in RATIOS {
        if let (Some(a), Some(b)) = (rounds(v6), rounds(v4))
            && !a.is_empty()
        {
            let (m, lo, hi) = quartiles(a.iter().zip(b).map(|(a, b)| a / b).collect());
            println!("IPv6 / IPv4, {what}: {m:.2}x [{lo:.2}..{hi:.2}] ({target})");
        }
    }
    for (a, b, what) in DIFFERENCES {
        if let (Some(a), Some(b)) = (rounds(a), rounds(b))
            && !a.is_empty()
        {
            let (m, lo, hi) = quartiles(a.iter().zip(b).map(|(a, b)| a - b).collect());
            println!("{what}: {m:+.1} ns [{lo:+.1}..{hi:+.1}] (target <= 15 ns)");
        }
    }
}

/// Median, 25th and 75th percentiles.
pub(super) fn quartiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: usize| v[(v.len() - 1) * q / 4];
    (at(2), at(1), at(3))
}

/// The IPv4 rows, in balancer `dp` (configured here).
fn ipv4_rows(dp: &mut lb_ctl::dataplane::aya::AyaDataplane) -> anyhow::Result<Rows> {
    let vips = vips();
    configure(dp, &vips);
    let quic = super::quic::established_short_header(dp, vips.len() as u32)?;
    let events = dp.take_flow_events();
    let tables = Tables::take(dp)?;

    let web = vips[0].addr;
    let syn = Frame::tcp(CLIENT, 45001, web, 80);
    let new_flow_key =
        FlowKey::new(ipv4_bytes(CLIENT), ipv4_bytes(web), 45001u16.to_be(), 80u16.to_be(), ip_proto::TCP, family::IPV4);
    // The reply's key names the backend the SYN is given; the ring alternates backends by slot.
    let b = crate::fixture::by_hash(&vips[0], lb_common::hash::client_hash(&ipv4_bytes(CLIENT), SEED));
    let reply_key = FlowKey {
        src: ipv4_bytes(b.0),
        dst: ipv4_bytes(CLIENT),
        src_port: b.1.to_be(),
        dst_port: 45001u16.to_be(),
        ..new_flow_key
    };
    let dsr_flow_key = FlowKey { dst: ipv4_bytes(vips[2].addr), src_port: 46001u16.to_be(), ..new_flow_key };
    // The fixture's dsr-l2 and dsr-gue VIPs (each with one backend on the segment).
    let (l2_vip, gue_vip) = (vips[9].addr, vips[11].addr);
    let l2_flow_key = FlowKey { dst: ipv4_bytes(l2_vip), src_port: 46101u16.to_be(), ..new_flow_key };
    let gue_flow_key = FlowKey { dst: ipv4_bytes(gue_vip), src_port: 46201u16.to_be(), ..new_flow_key };
    let established = |f: Frame| {
        f.with(|f| {
            f.l4 = L4::TcpAck;
            f.payload = vec![b'x'; 64]
        })
        .bytes()
    };
    // A set full of proven flows (connections that sent more than a SYN), and a SYN of that set.
    let key_of = |port: u16| FlowKey { src_port: port.to_be(), ..new_flow_key };
    let guarded = dp.flow_set_of(&key_of(47000));
    let mut same_set = (47001..=u16::MAX).filter(|p| dp.flow_set_of(&key_of(*p)) == guarded);
    let proven_ports: Vec<u16> = same_set.by_ref().take(FLOW_WAYS).collect();
    let shut_out = Frame::tcp(CLIENT, same_set.next().expect("a 5th port of the set"), web, 80).bytes();
    let paths = [
        Path {
            name: "non-VIP pass",
            frame: Frame::tcp(CLIENT, 40000, [192, 0, 2, 1], 22).bytes(),
            action: 2,
            forget: None,
            target: Some(20.0),
            katran: true,
            budget: UNSPENT,
            share: false,
            trace: false,
        },
        Path {
            name: "established TCP (NAT)",
            frame: established(Frame::tcp(CLIENT, 45000, web, 80)),
            action: 3,
            forget: None,
            target: Some(100.0),
            katran: true,
            budget: UNSPENT,
            share: false,
            trace: false,
        },
        Path {
            name: "non-VIP pass, trace on",
            frame: Frame::tcp(CLIENT, 40000, [192, 0, 2, 1], 22).bytes(),
            action: 2,
            forget: None,
            target: None,
            katran: false,
            budget: UNSPENT,
            share: false,
            trace: true,
        },
        Path {
            name: "established TCP (NAT), trace on",
            frame: established(Frame::tcp(CLIENT, 45000, web, 80)),
            action: 3,
            forget: None,
            target: None,
            katran: false,
            budget: UNSPENT,
            share: false,
            trace: true,
        },
        Path {
            name: "new TCP flow (SYN, NAT)",
            frame: syn.bytes(),
            action: 3,
            forget: Some((dp.flow_set_of(&new_flow_key), Some(dp.flow_set_of(&reply_key)))),
            target: Some(250.0),
            katran: true,
            budget: UNSPENT,
            share: false,
            trace: false,
        },
        Path {
            name: "new TCP flow (SYN, DSR)",
            frame: Frame::tcp(CLIENT, 46001, vips[2].addr, 80).bytes(),
            action: 3,
            forget: Some((dp.flow_set_of(&dsr_flow_key), None)),
            target: Some(250.0),
            katran: true,
            budget: UNSPENT,
            share: false,
            trace: false,
        },
        Path {
            name: "new TCP flow (SYN, DSR, shared)",
            frame: Frame::tcp(CLIENT, 46001, vips[2].addr, 80).bytes(),
            action: 3,
            forget: Some((dp.flow_set_of(&dsr_flow_key), None)),
            target: None,
            katran: false,
            budget: UNSPENT,
            share: true,
            trace: false,
        },
        Path {
            name: "SYN, NAT, budget spent",
            frame: syn.bytes(),
            action: 3,
            forget: Some((dp.flow_set_of(&new_flow_key), Some(dp.flow_set_of(&reply_key)))),
            target: None,
            katran: false,
            budget: 1,
            share: false,
            trace: false,
        },
        Path {
            name: "SYN, NAT, set of proven flows",
            frame: shut_out,
            action: 3,
            forget: None,
            target: None,
            katran: false,
            budget: UNSPENT,
            share: false,
            trace: false,
        },
        Path {
            name: "established UDP (NAT)",
            frame: Frame::udp(CLIENT, 5000, web, 53).bytes(),
            action: 3,
            forget: None,
            target: None,
            katran: true,
            budget: UNSPENT,
            share: false,
            trace: false,
        },
        Path {
            // The backend's answer on the established TCP row's connection: its reply entry,
            // recorded with the flow, gives it the VIP back as source.
            name: "NAT reply (established TCP)",
            frame: established(Frame::tcp(b.0, b.1, CLIENT, 45000)),
            action: 3,
            forget: None,
            target: None,
            katran: false,
            budget: UNSPENT,
            share: false,
            trace: false,
        },
        Path {
            name: "IPIP encapsulation (DSR)",
            frame: established(Frame::tcp(CLIENT, 46000, vips[2].addr, 80)),
            action: 3,
            forget: None,
            target: None,
            katran: true,
            budget: UNSPENT,
            share: false,
            trace: false,
        },
        Path {
            name: "GUE encapsulation (DSR)",
            frame: established(Frame::tcp(CLIENT, 46200, gue_vip, 80)),
            action: 3,
            forget: None,
            target: None,
            katran: false,
            budget: UNSPENT,
            share: false,
            trace: false,
        },
        Path {
            name: "new TCP flow (SYN, GUE)",
            frame: Frame::tcp(CLIENT, 46201, gue_vip, 80).bytes(),
            action: 3,
            forget: Some((dp.flow_set_of(&gue_flow_key), None)),
            target: Some(250.0),
            katran: false,
            budget: UNSPENT,
            share: false,
            trace: false,
        },
        Path {
            name: "MAC rewrite (DSR by MAC)",
            frame: established(Frame::tcp(CLIENT, 46100, l2_vip, 80)),
            action: 3,
            forget: None,
            target: None,
            katran: false,
            budget: UNSPENT,
            share: false,
            trace: false,
        },
        Path {
            name: "new TCP flow (SYN, L2)",
            frame: Frame::tcp(CLIENT, 46101, l2_vip, 80).bytes(),
            action: 3,
            forget: Some((dp.flow_set_of(&l2_flow_key), None)),
            target: Some(250.0),
            katran: false,
            budget: UNSPENT,
            share: false,
            trace: false,
        },
    ];
    // Warm-up: fill the set of the "set of proven flows" row with proven flows (SYN, then ACK).
    let warm = proven_ports
        .iter()
        .flat_map(|port| {
            [L4::TcpSyn, L4::TcpAck].map(|l4| Frame::tcp(CLIENT, *port, web, 80).with(|f| f.l4 = l4).bytes())
        })
        .collect();
    Ok(Rows { paths: paths.into_iter().chain([quic]).collect(), tables, events, warm })
}

/// One family's rows, in its own balancer.
pub(super) struct Rows {
    pub(super) paths: Vec<Path>,
    pub(super) tables: Tables,
    /// FLOW_EVENTS (the shared-flow row's reports), drained after every round as the daemon's
    /// sender would.
    pub(super) events: Option<aya::maps::RingBuf<MapData>>,
    /// Frames run once before the rows (flows a row needs in place).
    pub(super) warm: Vec<Vec<u8>>,
}

/// The maps a row changes: the connection tables (emptied for new-flow rows) and CONFIG.
pub(super) struct Tables {
    pub(super) flows: Array<MapData, ForwardSet>,
    pub(super) reverse: Array<MapData, ReverseSet>,
    pub(super) config: Array<MapData, DataplaneConfig>,
    /// TRACE: a filter set for the rows that trace.
    pub(super) trace: Array<MapData, TraceControl>,
}

impl Tables {
    /// Takes the maps a row changes out of the balancer's object.
    pub(super) fn take(dp: &mut lb_ctl::dataplane::aya::AyaDataplane) -> anyhow::Result<Tables> {
        let mut take = |name: &str| dp.ebpf_mut().take_map(name).ok_or_else(|| anyhow::anyhow!("no map {name}"));
        Ok(Tables {
            flows: Array::try_from(take(map_names::FLOWS)?)?,
            reverse: Array::try_from(take(map_names::REVERSE_FLOWS)?)?,
            config: Array::try_from(take(map_names::CONFIG)?)?,
            trace: Array::try_from(take(map_names::TRACE)?)?,
        })
    }
}

impl Tables {
    fn set_row(&mut self, path: &Path) -> anyhow::Result<()> {
        let current = self.config.get(&0, 0)?;
        let share_flows = u8::from(path.share);
        self.config.set(0, DataplaneConfig { new_flow_budget: path.budget, share_flows, ..current }, 0)?;
        let mut trace = TraceControl::default();
        if path.trace {
            // A client the benchmark's frames never come from: every packet is checked
            // against the filter, none is recorded.
            trace.filters[0] = TraceFilter {
                client: ipv4_bytes([198, 51, 100, 250]),
                client_mask: [0xff; 16],
                client_family: family::IPV4,
                ..TraceFilter::ANY
            };
            trace.active = 1;
        }
        self.trace.set(0, trace, 0)?;
        Ok(())
    }

    fn forget(&mut self, path: &Path) -> anyhow::Result<()> {
        if let Some((key, reply)) = &path.forget {
            forget(&mut self.flows, key)?;
            if let Some(reply) = reply {
                forget(&mut self.reverse, reply)?;
            }
        }
        Ok(())
    }
}

/// One family's rows and its balancer's program.
pub(super) struct Group<'a> {
    pub(super) rows: Rows,
    pub(super) ours: &'a Xdp,
    /// `--against`: the other build's rows (its own maps) and program.
    pub(super) against: Option<(Rows, &'a Xdp)>,
}

/// One row's figures: its cost, and its extra ns of every round (for ratios paired by round).
pub(super) struct RowResult {
    pub(super) cost: PathCost,
    pub(super) extra_by_round: Vec<f64>,
}

/// Katran's program and the maps a run changes, when it runs beside ours.
pub(super) type KatranRun<'a> = Option<(&'a Xdp, &'a mut super::katran::Maps)>;

/// How many rounds, and how the programs take turns within one ([`Options::in_blocks`]).
#[derive(Clone, Copy)]
pub(super) struct Turns {
    pub rounds: usize,
    pub in_blocks: bool,
}

/// One of the programs a row runs.
#[derive(Clone, Copy, PartialEq)]
enum Who {
    Bare,
    Ours,
    B,
    Katran,
}

/// Checks every path takes its branch, then times them all: in each round every row of every
/// group in turn (the groups' rows alternated), each row `bare`, `ours` and Katran (its rows)
/// in turn, call by call or in blocks ([`Turns`]); medians over rounds. The rounds interleave
/// the rows, so a slow phase of the host (seconds long on a shared VM) hits every row alike
/// rather than the rows it happens to fall on.
pub(super) fn measure(
    groups: &mut [Group],
    bare: &Xdp,
    mut katran: KatranRun,
    ingress: u32,
    turns: Turns,
) -> anyhow::Result<Vec<RowResult>> {
    let rounds = turns.rounds;
    // Katran's key of each row's frame, for the rows it runs (new-flow rows forget it).
    let katran_keys: Vec<Vec<Option<super::katran::FlowKey>>> = groups
        .iter()
        .map(|g| {
            g.rows
                .paths
                .iter()
                .map(|p| (katran.is_some() && p.katran).then(|| super::katran::flow_key(&p.frame)))
                .collect()
        })
        .collect();
    // Warm up: establish the flows, and check each path takes the branch it is named after.
    for (g, group) in groups.iter_mut().enumerate() {
        for (i, path) in group.rows.paths.iter().enumerate() {
            group.rows.tables.set_row(path)?;
            for _ in 0..2 {
                group.rows.tables.forget(path)?;
                let r = run_xdp(group.ours, &path.frame, ingress);
                check_verdict(path, r.action, "")?;
                if let Some((rows, b)) = &mut group.against {
                    // B's own row: its frames are picked for its table's seed (a set, a way).
                    let own = &rows.paths[i];
                    anyhow::ensure!(own.name == path.name, "B's rows differ from ours: {}", own.name);
                    rows.tables.set_row(own)?;
                    rows.tables.forget(own)?;
                    check_verdict(own, run_xdp(b, &own.frame, ingress).action, "B, ")?;
                }
                if let (Some((program, maps)), Some(key)) = (katran.as_mut(), &katran_keys[g][i]) {
                    if path.forget.is_some() {
                        maps.forget(key)?;
                    }
                    check_verdict(path, run_xdp(program, &path.frame, ingress).action, "Katran, ")?;
                }
            }
        }
    }
    // The order of a round: row i of every group, then row i + 1 of every group, ...
    let longest = groups.iter().map(|g| g.rows.paths.len()).max().unwrap_or(0);
    let order: Vec<(usize, usize)> = (0..longest)
        .flat_map(|i| (0..groups.len()).map(move |g| (g, i)))
        .filter(|&(g, i)| i < groups[g].rows.paths.len())
        .collect();
    let mut extra: Vec<Vec<Vec<f64>>> = groups.iter().map(|g| vec![Vec::new(); g.rows.paths.len()]).collect();
    let mut ours_ns = extra.clone();
    let mut bare_ns = extra.clone();
    let mut katran_extra = extra.clone();
    let mut b_extra = extra.clone();

    let _stats = enable_stats(Stats::RunTime)?;
    for round in 0..rounds {
        // B runs after ours in even rounds and before it in odd ones, so that whatever the
        // place in the loop costs (the caches the program before it left) falls on both alike.
        let b_first = round % 2 == 1;
        for &(g, i) in &order {
            let group = &mut groups[g];
            let path = &group.rows.paths[i];
            let katran_key = &katran_keys[g][i];
            group.rows.tables.set_row(path)?;
            let (mut b_state, mut o_state, mut k_state, mut ab_state) = ((0, 0), (0, 0), (0, 0), (0, 0));
            ns_per_run(bare, &mut b_state);
            ns_per_run(group.ours, &mut o_state);
            if let Some((program, _)) = &katran {
                ns_per_run(program, &mut k_state);
            }
            if let Some((rows, b)) = &mut group.against {
                rows.tables.set_row(&rows.paths[i])?;
                ns_per_run(b, &mut ab_state);
            }
            // One call of `who` on this row's frame (new-flow rows forget the flow first).
            let mut call = |who: Who| -> anyhow::Result<()> {
                match who {
                    Who::Bare => drop(run_xdp(bare, &path.frame, ingress)),
                    Who::Ours => {
                        group.rows.tables.forget(path)?;
                        run_xdp(group.ours, &path.frame, ingress);
                    }
                    Who::B => {
                        if let Some((rows, b)) = &mut group.against {
                            let own = &rows.paths[i];
                            rows.tables.forget(own)?;
                            run_xdp(b, &own.frame, ingress);
                        }
                    }
                    Who::Katran => {
                        if let (Some((program, maps)), Some(key)) = (katran.as_mut(), katran_key) {
                            if path.forget.is_some() {
                                maps.forget(key)?;
                            }
                            run_xdp(program, &path.frame, ingress);
                        }
                    }
                }
                Ok(())
            };
            let others = if b_first { [Who::B, Who::Ours, Who::Katran] } else { [Who::Ours, Who::B, Who::Katran] };
            if turns.in_blocks {
                let mut order = vec![Who::Bare];
                // Katran's block before ours in odd rounds: the place in the loop falls on both.
                order.extend(if b_first { [Who::Katran, Who::B, Who::Ours] } else { others });
                for who in order {
                    for _ in 0..CALLS_PER_ROUND {
                        call(who)?;
                    }
                }
            } else {
                for _ in 0..CALLS_PER_ROUND {
                    call(Who::Bare)?;
                    for who in others {
                        call(who)?;
                    }
                }
            }
            let b = ns_per_run(bare, &mut b_state);
            let o = ns_per_run(group.ours, &mut o_state);
            if let Some((rows, program)) = &mut group.against {
                b_extra[g][i].push(ns_per_run(program, &mut ab_state) - b);
                while rows.events.as_mut().and_then(|e| e.next()).is_some() {}
            }
            if let (Some((program, _)), Some(_)) = (&katran, katran_key) {
                katran_extra[g][i].push(ns_per_run(program, &mut k_state) - b);
            }
            while group.rows.events.as_mut().and_then(|e| e.next()).is_some() {}
            bare_ns[g][i].push(b);
            ours_ns[g][i].push(o);
            extra[g][i].push(o - b);
        }
    }

    let mut results = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        println!(
            "lb_ingress per-path cost, BPF_PROG_TEST_RUN single runs, {rounds} rounds x {CALLS_PER_ROUND} calls, \
             every row of both families in each round, medians"
        );
        print!(
            "{:<38} {:>9} {:>9} {:>9} {:>15} {:>9}",
            "path", "ours ns", "bare ns", "extra ns", "extra 25..75%", "target"
        );
        if katran.is_some() {
            print!(" {:>13} {:>15} {:>21}", "Katran extra", "Katran 25..75%", "Katran / ours [IQR]");
        }
        if group.against.is_some() {
            print!(" {:>9} {:>21}", "B extra", "B / ours [IQR]");
        }
        println!();
        for (i, path) in group.rows.paths.iter().enumerate() {
            let (m, lo, hi) = quartiles(extra[g][i].clone());
            print!(
                "{:<38} {:>9.1} {:>9.1} {:>9.1} {:>15} {:>9}",
                path.name,
                median(ours_ns[g][i].clone()),
                median(bare_ns[g][i].clone()),
                m,
                format!("{lo:.0}..{hi:.0}"),
                path.target.map_or("-".to_string(), |t| format!("<= {t:.0}")),
            );
            let katran_ns = (!katran_extra[g][i].is_empty()).then(|| {
                let (km, klo, khi) = quartiles(katran_extra[g][i].clone());
                let ratios = katran_extra[g][i].iter().zip(&extra[g][i]).map(|(k, o)| k / o).collect();
                let (r, rlo, rhi) = quartiles(ratios);
                print!(
                    " {km:>13.1} {:>15} {:>21}",
                    format!("{klo:.0}..{khi:.0}"),
                    format!("{r:.2}x [{rlo:.2}..{rhi:.2}]")
                );
                km
            });
            if !b_extra[g][i].is_empty() {
                let (bm, ..) = quartiles(b_extra[g][i].clone());
                let ratios = b_extra[g][i].iter().zip(&extra[g][i]).map(|(b, o)| b / o).collect();
                let (r, rlo, rhi) = quartiles(ratios);
                print!(" {bm:>9.1} {:>21}", format!("{r:.3}x [{rlo:.3}..{rhi:.3}]"));
            }
            println!();
            results.push(RowResult {
                cost: PathCost { path: path.name.to_string(), extra_ns: m, katran_ns },
                extra_by_round: extra[g][i].clone(),
            });
        }
        println!();
    }
    if katran.is_some() {
        println!(
            "(Katran: the same frames, run in the same loop as ours; one SYN path (ring, then IPIP) for both \
             our NAT and DSR SYN rows, one established path for our NAT and IPIP rows; Katran / ours is paired by \
             round, the target is >= 2x)"
        );
    }
    Ok(results)
}

/// A row's verdict is the one its path is named after.
fn check_verdict(path: &Path, action: u32, who: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        action == path.action,
        "{who}{}: verdict {} (expected {})",
        path.name,
        action_name(action),
        action_name(path.action)
    );
    Ok(())
}
