//! Per-packet cost as the number of flows grows (`lb-bench flows`, root): two established
//! paths of lb_ingress, UDP by NAT and TCP by IP in IP (DSR, Katran's own path), with 1 to
//! 1,000,000 flows in the connection table, packets taking the flows in a scattered order, so
//! the larger counts miss the CPU caches as real traffic does. Each flow is recorded by two
//! packets (an established flow has sent more than its first). Same method as `lb-bench
//! dataplane` (single BPF_PROG_TEST_RUN calls alternating with
//! a bare XDP_PASS, extra ns over bare, medians over rounds). Prints figures, asserts nothing.
//!
//! With `--katran DIR` Katran runs the same packets in the same loop (call by call: bare, then
//! ours and Katran, their order reversed every other round; with `--in-blocks` each program
//! takes the round's flows in a block of its own, so neither runs with the other's memory in
//! the caches), its connection table (this CPU's LRU) of the same capacity as ours in each
//! series. The process is pinned to one CPU. `--profile FLOWS` samples lb_ingress by source
//! line while that count runs. With
//! `--against OBJ` another build's lb_ingress (with tables of its own, filled alike) takes its
//! turns in the same loop too, "B / ours" paired by round.
//!
//! The floor runs in the same turns in the million-flow series: lb_set_read (the `lb-ingress`
//! object's benchmark program) parses each packet, hashes its key and reads one word of its
//! set, in a balancer of its own with the same flows recorded (sharing ours, each would find
//! the set the other had just read in the caches). What lb_ingress costs over it is its work;
//! the floor's own growth with the flows is the price of one read of a set not in the caches.
//!
//! Two series: the table sized for a million flows throughout (as a balancer runs), and a
//! table sized to each count (four ways per flow). Their difference is the cost of the table's
//! memory footprint alone: the flows and the work per packet are the same.
use aya::programs::Xdp;
use aya::sys::{Stats, enable_stats};
use lb_common::program_names;
use lb_common::stats::Counter;
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::aya::AyaDataplane;
use lb_ctl::dataplane::load::{LoadOptions, load_decap, load_ingress, program};

use super::dataplane::{Turns, against_object, ns_per_run, quartiles};
use super::katran;
use super::stats::median;
use crate::fixture::{RING, configure, lab, vips};
use crate::netns::ifindex;
use crate::packets::{Frame, L4};
use crate::testrun::{action_name, run_xdp};
use std::path::Path;

pub const FLOW_COUNTS: [u32; 5] = [1, 1_000, 10_000, 100_000, 1_000_000];
/// Four ways per set: room for 1M flows with few sets overflowing.
const FLOW_TABLE: u32 = 1 << 22;
/// The smallest table of the sized series.
const MIN_TABLE: u32 = 4096;
const ROUNDS: usize = 15;
/// Rounds of the profiled count (`--profile`): enough samples inside the program.
const PROFILE_ROUNDS: usize = 10 * ROUNDS;
const CALLS_PER_ROUND: usize = 2000;
const XDP_TX: u32 = 3;

/// A program's block of calls in a round with `--in-blocks`: long enough for a program to walk
/// its own table's pages warm again after the others' blocks (at a million flows, blocks of
/// 2,000 calls read Katran's memory in ours still, 40,000 less so, 100,000 read ours as it is
/// with no Katran loaded).
const BLOCK_CALLS: usize = 100_000;

/// One count's figure.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FlowsCost {
    /// Which path ([`PATHS`]).
    pub path: &'static str,
    pub flows: u32,
    /// Connection-table ways the program was loaded with.
    pub table_ways: u32,
    pub extra_ns: f64,
    /// Katran's, with a connection table of as many flows as our table has ways (when it ran).
    pub katran_ns: Option<f64>,
    /// The floor's (lb_set_read), in the million-flow series.
    pub floor_ns: Option<f64>,
}

/// One count's measurement: ours, Katran's and, with `--against`, B's extra ns over ours,
/// paired by round (median, 25%, 75%).
struct Measured {
    ours: f64,
    katran: Option<f64>,
    floor: Option<f64>,
    b_over_ours: Option<(f64, f64, f64)>,
}

impl Measured {
    /// The figure `series` returns for `flows` flows in a table of `table_ways`.
    fn cost(&self, path: &FlowPath, flows: u32, table_ways: u32) -> FlowsCost {
        FlowsCost {
            path: path.name,
            flows,
            table_ways,
            extra_ns: self.ours,
            katran_ns: self.katran,
            floor_ns: self.floor,
        }
    }
}

/// A measured path: its name, and flow `i`'s packet on it.
pub struct FlowPath {
    pub name: &'static str,
    /// The fixture VIP (index into `vips()`) its packets go to.
    vip: usize,
    frame: fn(u32, [u8; 4]) -> Vec<u8>,
}

/// The paths measured, each in a series of its own: the first is the report's.
pub const PATHS: [FlowPath; 2] = [
    FlowPath { name: "established UDP (NAT)", vip: 0, frame: nat_frame },
    FlowPath { name: "established TCP, IP in IP (DSR)", vip: 2, frame: dsr_frame },
];

/// Flow `i`'s client address and port.
fn client(i: u32) -> ([u8; 4], u16) {
    let (addr, port) = (10 + i / 60_000, 1024 + i % 60_000);
    ([192, 0, 2, addr as u8], port as u16)
}

/// Flow `i`'s packet towards `vip` (NAT), as UDP.
fn nat_frame(i: u32, vip: [u8; 4]) -> Vec<u8> {
    let (addr, port) = client(i);
    Frame::udp(addr, port, vip, 53).bytes()
}

/// Flow `i`'s packet towards `vip` (IP in IP): a TCP ACK with 64 bytes of data (an
/// established connection's packet, recorded as proven by its first).
fn dsr_frame(i: u32, vip: [u8; 4]) -> Vec<u8> {
    let (addr, port) = client(i);
    Frame::tcp(addr, port, vip, 80)
        .with(|f| {
            f.l4 = L4::TcpAck;
            f.payload = vec![b'x'; 64]
        })
        .bytes()
}

/// A balancer (of lb_ingress object `object`, else this build's) with a table of `table_ways`,
/// configured with the fixture's VIPs.
fn balancer(object: Option<&'static [u8]>, table_ways: u32) -> anyhow::Result<AyaDataplane> {
    let options =
        LoadOptions { pin_dir: None, ring_size: RING, flow_table_size: table_ways, object, ..LoadOptions::default() };
    let mut dp = AyaDataplane::new(load_ingress(&options)?, RING);
    if let Some(object) = object {
        super::dataplane::fit_older_object(&mut dp, object)?;
    }
    configure(&mut dp, &vips());
    Ok(dp)
}

/// This build's balancer with a table of `table_ways`, its floor program (lb_set_read) loaded.
fn floor_balancer(table_ways: u32) -> anyhow::Result<AyaDataplane> {
    let mut dp = balancer(None, table_ways)?;
    program(dp.ebpf_mut(), program_names::SET_READ)?.load()?;
    Ok(dp)
}

/// Program `name` of a loaded object.
fn loaded<'a>(dp: &'a AyaDataplane, name: &str) -> anyhow::Result<&'a Xdp> {
    let program = dp.ebpf().program(name).ok_or_else(|| anyhow::anyhow!("no program {name}"))?;
    Ok(program.try_into()?)
}

/// The balancers of one measurement: ours, the floor's (when it runs) and B's (`--against`).
struct Balancers<'a> {
    ours: &'a mut AyaDataplane,
    floor: Option<&'a mut AyaDataplane>,
    b: Option<&'a mut AyaDataplane>,
}

/// Records flows `from..count` in our balancer and B's (each flow's first two packets; Katran records
/// all `count` in a table of `table` flows: UDP entries age out after 30 s there), then measures
/// the extra ns per packet of an established flow, the packets visiting the `count` flows in
/// scattered order.
fn measure(
    balancers: Balancers,
    bare: &Xdp,
    mut katran: Option<(&Xdp, &mut katran::Maps)>,
    (from, count, table): (u32, u32, u32),
    ingress: u32,
    path: &FlowPath,
    turns: Turns,
) -> anyhow::Result<Measured> {
    let vip = vips()[path.vip].addr;
    let frame = |i| (path.frame)(i, vip);
    let Balancers { ours, floor, b } = balancers;
    let (ours, floor, b) = (&*ours, floor.map(|f| &*f), b.map(|b| &*b));
    fn ingress_of(dp: Option<&AyaDataplane>) -> anyhow::Result<Option<&Xdp>> {
        dp.map(|dp| loaded(dp, program_names::INGRESS)).transpose()
    }
    let recorders = [("ours", ingress_of(Some(ours))?), ("the floor's", ingress_of(floor)?), ("B", ingress_of(b)?)];
    let (ours, b) = (recorders[0].1.expect("ours"), recorders[2].1);
    let floor = floor.map(|f| loaded(f, program_names::SET_READ)).transpose()?;
    for (name, program) in recorders {
        let Some(program) = program else { continue };
        // Two packets a flow: an established flow has sent more than its first (which records
        // a UDP flow unproven; the second proves it, and a NAT flow's reply entry with it).
        for i in from..count {
            run_xdp(program, &frame(i), ingress);
            run_xdp(program, &frame(i), ingress);
        }
        let check = run_xdp(program, &frame(count - 1), ingress);
        anyhow::ensure!(check.action == XDP_TX, "{name}, flow {count}: verdict {}", action_name(check.action));
    }
    if let Some((program, maps)) = katran.as_mut() {
        maps.new_table(table)?;
        for i in 0..count {
            run_xdp(program, &frame(i), ingress);
        }
        let check = run_xdp(program, &frame(count - 1), ingress);
        anyhow::ensure!(check.action == XDP_TX, "Katran, flow {count}: verdict {}", action_name(check.action));
    }
    let katran = katran.map(|(program, _)| program);
    let mut bare_state = (0, 0);
    // Bare's run time and count so far: the rounds below take differences.
    ns_per_run(bare, &mut bare_state);
    // Ours first, the floor, Katran, B: the order of their turns in even rounds.
    let mut contenders = [Some(ours), floor, katran, b].map(|p| p.map(Contender::new));
    // A large step coprime with every count visits all the flows, in a scattered order.
    let mut at: u64 = 0;
    let step = |at: u64| (at + 2_654_435_761) % u64::from(count);
    for round in 0..turns.rounds {
        // The programs after bare take turns in one order, then the other: the last to run a
        // packet was seen to gain a few percent.
        let mut others = contenders.each_ref().map(|c| c.as_ref().map(|c| c.program));
        if round % 2 == 1 {
            others.reverse();
        }
        if turns.in_blocks {
            // Each program takes the round's packets in a block of its own, the same flows in
            // the same order: it runs with its own memory cached, as a host's one balancer does.
            let start = at;
            for program in [Some(bare)].into_iter().chain(others).flatten() {
                at = start;
                for _ in 0..BLOCK_CALLS {
                    at = step(at);
                    run_xdp(program, &frame(at as u32), ingress);
                }
            }
        } else {
            for _ in 0..CALLS_PER_ROUND {
                at = step(at);
                let packet = frame(at as u32);
                run_xdp(bare, &packet, ingress);
                for program in others.into_iter().flatten() {
                    run_xdp(program, &packet, ingress);
                }
            }
        }
        let base = ns_per_run(bare, &mut bare_state);
        for contender in contenders.iter_mut().flatten() {
            contender.note_round(base);
        }
    }
    let [Some(ours), floor, katran, b] = contenders else { unreachable!("ours always runs") };
    let b_over_ours = b.map(|b| quartiles(b.extra.iter().zip(&ours.extra).map(|(b, o)| b / o).collect()));
    Ok(Measured {
        ours: ours.median(),
        katran: katran.map(|k| k.median()),
        floor: floor.map(|f| f.median()),
        b_over_ours,
    })
}

/// A program taking turns with bare: its run-time counters as last read, and its extra ns per
/// call over bare's in each round.
struct Contender<'a> {
    program: &'a Xdp,
    state: (u64, u64),
    extra: Vec<f64>,
}

impl<'a> Contender<'a> {
    fn new(program: &'a Xdp) -> Self {
        let mut state = (0, 0);
        ns_per_run(program, &mut state);
        Contender { program, state, extra: Vec::new() }
    }

    /// Notes the round just run: its ns per call less `base`, bare's.
    fn note_round(&mut self, base: f64) {
        self.extra.push(ns_per_run(self.program, &mut self.state) - base);
    }

    fn median(&self) -> f64 {
        median(self.extra.iter().copied())
    }
}

/// The same Katran, lent to one measurement.
fn reborrow<'a>(katran: &'a mut Option<(&Xdp, &mut katran::Maps)>) -> Option<(&'a Xdp, &'a mut katran::Maps)> {
    katran.as_mut().map(|(program, maps)| (*program, &mut **maps))
}

/// `profile`: the count of flows whose measurement (million-flow table) is sampled by line.
pub fn run(
    katran_checkout: Option<&Path>,
    against: Option<&Path>,
    profile: Option<u32>,
    in_blocks: bool,
) -> anyhow::Result<Vec<FlowsCost>> {
    if let Some(count) = profile {
        anyhow::ensure!(FLOW_COUNTS.contains(&count), "--profile {count}: one of {FLOW_COUNTS:?}");
    }
    anyhow::ensure!(crate::privileges::require_root("lb-bench flows"), "the flows benchmark needs root");
    let katran_object = katran_checkout.map(katran::object_in).transpose()?;
    let against = against.map(against_object).transpose()?;
    let ns = lab();
    let _inside = ns.enter();
    let cpu = crate::testrun::pin_to_this_cpu()?;
    let g0 = ifindex("g0");
    let mut decap = load_decap()?;
    let bare: &Xdp = program(&mut decap, program_names::PASS)?;
    let mut katran = katran_object.as_deref().map(|o| katran::Katran::load(o, cpu, MIN_TABLE)).transpose()?;
    let mut katran = katran.as_mut().map(|k| k.parts()).transpose()?;
    let _stats = enable_stats(Stats::RunTime)?;
    if in_blocks {
        println!(
            "turns: in blocks of {BLOCK_CALLS} calls of one program, then the next (bare, then ours and the others, their order reversed every other round)"
        );
    }
    let mut costs = Vec::new();
    for path in &PATHS {
        costs.extend(series(path, bare, &mut katran, against, (cpu, g0), (profile, in_blocks))?);
    }
    Ok(costs)
}

/// One path's series: the table sized for a million flows, and a table sized to each count.
fn series(
    path: &FlowPath,
    bare: &Xdp,
    katran: &mut Option<(&Xdp, &mut katran::Maps)>,
    against: Option<&'static [u8]>,
    (cpu, g0): (u32, u32),
    (profile, in_blocks): (Option<u32>, bool),
) -> anyhow::Result<Vec<FlowsCost>> {
    let calls = if in_blocks { BLOCK_CALLS } else { CALLS_PER_ROUND };
    println!(
        "lb_ingress {} against the number of flows, {ROUNDS} rounds x {calls} calls, flows in scattered order, \
         medians, on CPU {cpu}",
        path.name
    );
    let shown = |ns: Option<f64>| ns.map_or("-".to_string(), |k| format!("{k:.1}"));
    let ratio =
        |r: Option<(f64, f64, f64)>| r.map_or("-".to_string(), |(m, lo, hi)| format!("{m:.3}x [{lo:.3}..{hi:.3}]"));
    print!("{:>10} {:>16} {:>14} {:>16} {:>14}", "flows", "table ways", "extra ns", "sized table ns", "floor ns");
    if katran.is_some() {
        print!(" {:>14} {:>20}", "Katran ns", "Katran sized ns");
    }
    if against.is_some() {
        print!(" {:>22} {:>22}", "B / ours [IQR]", "B / ours, sized");
    }
    println!();
    let mut costs = Vec::new();
    let mut full = balancer(None, FLOW_TABLE)?;
    let mut full_b = against.map(|object| balancer(Some(object), FLOW_TABLE)).transpose()?;
    let mut full_floor = floor_balancer(FLOW_TABLE)?;
    let mut recorded = 0;
    for count in FLOW_COUNTS {
        let profiled = profile == Some(count);
        let turns = Turns { rounds: if profiled { PROFILE_ROUNDS } else { ROUNDS }, in_blocks };
        let sampler = profiled.then(|| super::line_profile::Sampler::start(cpu)).transpose()?;
        let table = (recorded, count, FLOW_TABLE);
        let balancers = Balancers { ours: &mut full, floor: Some(&mut full_floor), b: full_b.as_mut() };
        let all = measure(balancers, bare, reborrow(katran), table, g0, path, turns)?;
        let samples = sampler.map(|s| s.stop()).transpose()?;
        recorded = count;
        costs.push(all.cost(path, count, FLOW_TABLE));
        let sized_ways = (4 * count).next_power_of_two().max(MIN_TABLE);
        let sized = if sized_ways < FLOW_TABLE {
            let mut dp = balancer(None, sized_ways)?;
            let mut b = against.map(|object| balancer(Some(object), sized_ways)).transpose()?;
            let table = (0, count, sized_ways);
            let turns = Turns { rounds: ROUNDS, in_blocks };
            let balancers = Balancers { ours: &mut dp, floor: None, b: b.as_mut() };
            let sized = measure(balancers, bare, reborrow(katran), table, g0, path, turns)?;
            costs.push(sized.cost(path, count, sized_ways));
            Some(sized)
        } else {
            None
        };
        let sized_ns = sized.as_ref().map_or("-".into(), |m| format!("{:>7.1} ({sized_ways} ways)", m.ours));
        print!("{count:>10} {FLOW_TABLE:>16} {:>14.1} {sized_ns:>16} {:>14}", all.ours, shown(all.floor));
        if katran.is_some() {
            print!(" {:>14} {:>20}", shown(all.katran), shown(sized.as_ref().and_then(|m| m.katran)));
        }
        if against.is_some() {
            print!(" {:>22} {:>22}", ratio(all.b_over_ours), ratio(sized.as_ref().and_then(|m| m.b_over_ours)));
        }
        println!();
        if let Some(samples) = samples {
            samples.report(program(full.ebpf_mut(), program_names::INGRESS)?, program_names::INGRESS)?;
        }
    }
    // A flow's first packet may not evict a proven flow (UDP's: `new_flow_set_proven`), a packet
    // of a connection already open may (TCP without SYN: `flow_table_full`).
    let counters = full.counters()?;
    let count = |c: Counter| counters.iter().find(|(k, _)| *k == c).map_or(0, |(_, v)| *v);
    println!(
        "(in the {FLOW_TABLE}-way table, packets of flows not in it, placed by the ring: {} evicting a flow from a \
         full set, {} not recorded for a set full of proven flows, {} not recorded for the new-flow budget)",
        count(Counter::FlowTableFull),
        count(Counter::FlowSetProven),
        count(Counter::FlowUnrecorded),
    );
    let series = |ways: u32| costs.iter().filter(move |c| c.table_ways == ways);
    if let (Some(one), Some(most)) = (series(FLOW_TABLE).next(), series(FLOW_TABLE).next_back()) {
        println!(
            "{} flows cost {:.2}x one flow (target <= 3x in a VM, 2x on bare metal); the difference between the columns is the table's \
             memory footprint alone (TLB reach: BPF arrays are mapped with 4 KiB pages)",
            most.flows,
            most.extra_ns / one.extra_ns.max(f64::MIN_POSITIVE)
        );
        if let (Some(floor), Some(floor_one)) = (most.floor_ns, one.floor_ns) {
            println!(
                "{} flows: the floor (parse, hash, one read of the flow's set) costs {floor:.1} ns, {:.2}x its one flow \
                 and {:.2}x lb_ingress's one flow; lb_ingress costs {:.1} ns over it ({:.1} at one flow)",
                most.flows,
                floor / floor_one.max(f64::MIN_POSITIVE),
                floor / one.extra_ns.max(f64::MIN_POSITIVE),
                most.extra_ns - floor,
                one.extra_ns - floor_one
            );
        }
        if let Some(katran_ns) = most.katran_ns {
            println!(
                "{} flows: ours / Katran {:.2}x (target <= 0.5x), Katran's {} flows cost {:.2}x its one flow",
                most.flows,
                most.extra_ns / katran_ns,
                most.flows,
                katran_ns / one.katran_ns.unwrap_or(f64::NAN)
            );
        }
    }
    println!();
    Ok(costs)
}
