//! Per-packet cost as the number of flows grows (`lb-bench flows`, root): the established UDP
//! (NAT) path of lb_ingress with 1 to 1,000,000 flows in the connection table, packets taking
//! the flows in a scattered order, so the larger counts miss the CPU caches as real traffic
//! does. Same method as `lb-bench dataplane` (single BPF_PROG_TEST_RUN calls alternating with
//! a bare XDP_PASS, extra ns over bare, medians over rounds). Prints figures, asserts nothing.
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
const ROUNDS: usize = 15;
const CALLS_PER_ROUND: usize = 2000;
const XDP_TX: u32 = 3;

/// One count's figure.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FlowsCost {
    pub flows: u32,
    pub extra_ns: f64,
}

/// Flow `i`'s packet: its own client address and port towards the fixture's UDP VIP.
fn frame(i: u32, vip: [u8; 4]) -> Vec<u8> {
    let (addr, port) = (10 + i / 60_000, 1024 + i % 60_000);
    Frame::udp([192, 0, 2, addr as u8], port as u16, vip, 53).bytes()
}

pub fn run() -> anyhow::Result<Vec<FlowsCost>> {
    anyhow::ensure!(crate::privileges::require_root("lb-bench flows"), "the flows benchmark needs root");
    let ns = lab();
    let _inside = ns.enter();
    let g0 = ifindex("g0");
    let options = LoadOptions { pin_dir: None, ring_size: RING, flow_table_size: FLOW_TABLE };
    let mut dp = AyaDataplane::new(load_ingress(&options)?, RING);
    let vips = vips();
    configure(&mut dp, &vips);
    let vip = vips[0].addr;
    let mut decap = load_decap()?;
    let bare: &Xdp = program(&mut decap, program_names::PASS)?;
    let mut costs = Vec::new();
    {
        let ours: &Xdp = program(dp.ebpf_mut(), program_names::INGRESS)?;
        let _stats = enable_stats(Stats::RunTime)?;
        println!(
            "lb_ingress established UDP (NAT) against the number of flows (connection table {FLOW_TABLE} ways), \
             {ROUNDS} rounds x {CALLS_PER_ROUND} calls, flows in scattered order, medians"
        );
        println!("{:>10} {:>12}", "flows", "extra ns");
        let mut established = 0;
        for count in FLOW_COUNTS {
            // Each flow's first packet records it; from then on its packets are established.
            for i in established..count {
                run_xdp(ours, &frame(i, vip), g0);
            }
            established = count;
            let check = run_xdp(ours, &frame(count - 1, vip), g0);
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
                    run_xdp(bare, &packet, g0);
                    run_xdp(ours, &packet, g0);
                }
                let b = ns_per_run(bare, &mut b_state);
                extra.push(ns_per_run(ours, &mut o_state) - b);
            }
            let extra_ns = median(extra.into_iter());
            println!("{count:>10} {extra_ns:>12.1}");
            costs.push(FlowsCost { flows: count, extra_ns });
        }
    }
    let evicted = dp.counters()?.into_iter().find(|(c, _)| *c == Counter::FlowTableFull).map_or(0, |(_, v)| v);
    println!(
        "(flows evicted from full sets while recording: {evicted}; an evicted flow's packets take the ring again)"
    );
    if let (Some(one), Some(most)) = (costs.first(), costs.last()) {
        println!(
            "{} flows cost {:.2}x one flow (target <= 2x)",
            most.flows,
            most.extra_ns / one.extra_ns.max(f64::MIN_POSITIVE)
        );
    }
    Ok(costs)
}
