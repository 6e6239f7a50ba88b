//! Per-packet cost as the number of flows grows (`lb-bench flows`, root): the established UDP
//! (NAT) path of lb_ingress with 1 to 1,000,000 flows in the connection table, packets taking
//! the flows in a scattered order, so the larger counts miss the CPU caches as real traffic
//! does. Same method as `lb-bench dataplane` (single BPF_PROG_TEST_RUN calls alternating with
//! a bare XDP_PASS, extra ns over bare, medians over rounds). Prints figures, asserts nothing.
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

use super::dataplane::ns_per_run;
use super::stats::median;
use crate::fixture::{RING, configure, lab, vips};
use crate::netns::ifindex;
use crate::packets::Frame;
use crate::testrun::{action_name, run_xdp};

pub const FLOW_COUNTS: [u32; 5] = [1, 1_000, 10_000, 100_000, 1_000_000];
/// Four ways per set: room for 1M flows with few sets overflowing.
const FLOW_TABLE: u32 = 1 << 22;
/// The smallest table of the sized series.
const MIN_TABLE: u32 = 4096;
const ROUNDS: usize = 15;
const CALLS_PER_ROUND: usize = 2000;
const XDP_TX: u32 = 3;

/// One count's figure.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FlowsCost {
    pub flows: u32,
    /// Connection-table ways the program was loaded with.
    pub table_ways: u32,
    pub extra_ns: f64,
}

/// Flow `i`'s packet: its own client address and port towards the fixture's UDP VIP.
fn frame(i: u32, vip: [u8; 4]) -> Vec<u8> {
    let (addr, port) = (10 + i / 60_000, 1024 + i % 60_000);
    Frame::udp([192, 0, 2, addr as u8], port as u16, vip, 53).bytes()
}

/// A balancer with a table of `table_ways`, configured with the fixture's VIPs.
fn balancer(table_ways: u32) -> anyhow::Result<AyaDataplane> {
    let options = LoadOptions { pin_dir: None, ring_size: RING, flow_table_size: table_ways };
    let mut dp = AyaDataplane::new(load_ingress(&options)?, RING);
    configure(&mut dp, &vips());
    Ok(dp)
}

/// Records flows `from..count` (each flow's first packet), then measures the extra ns per
/// packet of an established flow, the packets visiting the `count` flows in scattered order.
fn measure(dp: &mut AyaDataplane, bare: &Xdp, from: u32, count: u32, ingress: u32) -> anyhow::Result<f64> {
    let vip = vips()[0].addr;
    let ours: &Xdp = program(dp.ebpf_mut(), program_names::INGRESS)?;
    for i in from..count {
        run_xdp(ours, &frame(i, vip), ingress);
    }
    let check = run_xdp(ours, &frame(count - 1, vip), ingress);
    anyhow::ensure!(check.action == XDP_TX, "flow {count}: verdict {}", action_name(check.action));
    let (mut b_state, mut o_state) = ((0, 0), (0, 0));
    ns_per_run(bare, &mut b_state);
    ns_per_run(ours, &mut o_state);
    // A large step coprime with every count visits all the flows, in a scattered order.
    let mut at: u64 = 0;
    let mut extra = Vec::new();
    for _ in 0..ROUNDS {
        for _ in 0..CALLS_PER_ROUND {
            at = (at + 2_654_435_761) % u64::from(count);
            let packet = frame(at as u32, vip);
            run_xdp(bare, &packet, ingress);
            run_xdp(ours, &packet, ingress);
        }
        let b = ns_per_run(bare, &mut b_state);
        extra.push(ns_per_run(ours, &mut o_state) - b);
    }
    Ok(median(extra.into_iter()))
}

fn evicted(dp: &AyaDataplane) -> anyhow::Result<u64> {
    Ok(dp.counters()?.into_iter().find(|(c, _)| *c == Counter::FlowTableFull).map_or(0, |(_, v)| v))
}

pub fn run() -> anyhow::Result<Vec<FlowsCost>> {
    anyhow::ensure!(crate::privileges::require_root("lb-bench flows"), "the flows benchmark needs root");
    let ns = lab();
    let _inside = ns.enter();
    let g0 = ifindex("g0");
    let mut decap = load_decap()?;
    let bare: &Xdp = program(&mut decap, program_names::PASS)?;
    let _stats = enable_stats(Stats::RunTime)?;
    println!(
        "lb_ingress established UDP (NAT) against the number of flows, {ROUNDS} rounds x {CALLS_PER_ROUND} calls, \
         flows in scattered order, medians"
    );
    println!("{:>10} {:>16} {:>14} {:>16}", "flows", "table ways", "extra ns", "sized table ns");
    let mut costs = Vec::new();
    let mut full = balancer(FLOW_TABLE)?;
    let mut recorded = 0;
    for count in FLOW_COUNTS {
        let extra_ns = measure(&mut full, bare, recorded, count, g0)?;
        recorded = count;
        costs.push(FlowsCost { flows: count, table_ways: FLOW_TABLE, extra_ns });
        let sized_ways = (4 * count).next_power_of_two().max(MIN_TABLE);
        let sized = if sized_ways < FLOW_TABLE {
            let mut dp = balancer(sized_ways)?;
            let ns = measure(&mut dp, bare, 0, count, g0)?;
            costs.push(FlowsCost { flows: count, table_ways: sized_ways, extra_ns: ns });
            format!("{ns:>7.1} ({sized_ways} ways)")
        } else {
            "-".into()
        };
        println!("{count:>10} {FLOW_TABLE:>16} {extra_ns:>14.1} {sized:>16}");
    }
    println!(
        "(flows evicted from full sets while recording in the {FLOW_TABLE}-way table: {}; an evicted flow's packets \
         take the ring again)",
        evicted(&full)?
    );
    let series = |ways: u32| costs.iter().filter(move |c| c.table_ways == ways);
    if let (Some(one), Some(most)) = (series(FLOW_TABLE).next(), series(FLOW_TABLE).next_back()) {
        println!(
            "{} flows cost {:.2}x one flow (target <= 2x); the difference between the columns is the table's \
             memory footprint alone (TLB reach: BPF arrays are mapped with 4 KiB pages)",
            most.flows,
            most.extra_ns / one.extra_ns.max(f64::MIN_POSITIVE)
        );
    }
    Ok(costs)
}
