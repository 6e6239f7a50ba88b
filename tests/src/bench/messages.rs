//! `bench dataplane`'s last table: what telling an operator about a packet costs that packet,
//! by the two ways the program has. A drop (a SYN to a VIP without backends) runs, call by
//! call beside the bare program, in a balancer loaded without debug messages, in one loaded
//! with them (one aya-log message per drop), and in the first while a trace that matches it
//! runs (one `lb-ctl trace` record on the TRACE_EVENTS ring buffer). Both rings are drained
//! between rounds, outside the timed calls, so no record is refused for want of room.
use aya::programs::Xdp;
use aya::sys::{Stats, enable_stats};
use aya_log::EbpfLogger;
use lb_common::program_names;
use lb_common::trace::{TraceControl, TraceFilter};
use lb_ctl::dataplane::Dataplane as _;
use lb_ctl::dataplane::load::program;

use super::dataplane::ns_per_run;
use crate::fixture::{CLIENT, balancer_loaded, configure, vips};
use crate::packets::Frame;
use crate::testrun::run_xdp;

/// Calls of each row per round: the records of one round fit either ring (aya-log's 128 KiB).
const CALLS_PER_ROUND: usize = 400;

/// Drops the messages it is handed: the benchmark times making them, not printing them.
struct Discard;

impl log::Log for Discard {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, _: &log::Record<'_>) {}
    fn flush(&self) {}
}

pub(super) fn run(bare: &Xdp, ingress: u32, rounds: usize) -> anyhow::Result<()> {
    let mut quiet = balancer_loaded(false);
    let mut telling = balancer_loaded(true);
    configure(&mut quiet, &vips());
    configure(&mut telling, &vips());
    let mut messages = EbpfLogger::init_with_logger(telling.ebpf_mut(), Discard)?;
    let mut records = quiet.take_trace().ok_or_else(|| anyhow::anyhow!("no TRACE_EVENTS"))?.events;
    // The fixture's VIP without backends: every SYN is dropped (drop_no_backend).
    let drop = Frame::tcp(CLIENT, 40000, [203, 0, 113, 30], 80).bytes();
    let traced = TraceControl { active: 1, budget: u32::MAX, filters: [TraceFilter::ANY; 4] };
    let quiet_prog: &Xdp = program(quiet.ebpf_mut(), program_names::INGRESS)?;
    let quiet_prog = quiet_prog as *const Xdp;
    let telling_prog: &Xdp = program(telling.ebpf_mut(), program_names::INGRESS)?;
    let telling_prog = telling_prog as *const Xdp;
    let rows: [(&str, bool); 3] = [
        ("drop, not told", false),
        ("drop, one debug message (aya-log)", false),
        ("drop, one trace record (ring buffer)", true),
    ];
    let mut extra = vec![Vec::new(); rows.len()];
    let _stats = enable_stats(Stats::RunTime)?;
    for _ in 0..rounds {
        for (i, (_, trace)) in rows.iter().enumerate() {
            quiet.set_trace(&if *trace { traced } else { TraceControl::default() })?;
            // SAFETY: the programs live in their balancers' objects, which outlive the loop
            // and are not moved; the balancers are only used here to write TRACE.
            let ours = unsafe { &*if i == 1 { telling_prog } else { quiet_prog } };
            let (mut b_state, mut o_state) = ((0, 0), (0, 0));
            ns_per_run(bare, &mut b_state);
            ns_per_run(ours, &mut o_state);
            for _ in 0..CALLS_PER_ROUND {
                run_xdp(bare, &drop, ingress);
                let r = run_xdp(ours, &drop, ingress);
                anyhow::ensure!(r.action == 1, "the drop row was not dropped (action {})", r.action);
            }
            let b = ns_per_run(bare, &mut b_state);
            extra[i].push(ns_per_run(ours, &mut o_state) - b);
            messages.flush();
            while records.next().is_some() {}
        }
    }
    quiet.set_trace(&TraceControl::default())?;
    println!(
        "Telling about a packet: extra ns over bare, {rounds} rounds x {CALLS_PER_ROUND} calls, median [25%..75%]"
    );
    for (i, (name, _)) in rows.iter().enumerate() {
        let (m, lo, hi) = super::dataplane::quartiles(extra[i].clone());
        println!("{name:<38} {m:>9.1} {:>15}", format!("{lo:.0}..{hi:.0}"));
    }
    println!();
    Ok(())
}
