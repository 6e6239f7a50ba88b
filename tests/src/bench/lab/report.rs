//! The summary of a lab run: per workload and peer the median and spread, and lb-ctl's ratio
//! to each peer paired within each repetition (then the median of those ratios).
use super::peers::{PEERS, Peer};
use super::workloads::WORKLOADS;
use super::{Results, Run};
use crate::bench::stats::median;

/// A figure with 3 significant digits and k/M suffixes.
pub fn figure(v: f64) -> String {
    match v.abs() {
        x if x >= 1e6 => format!("{:.2}M", v / 1e6),
        x if x >= 1e4 => format!("{:.1}k", v / 1e3),
        x if x >= 100.0 => format!("{v:.0}"),
        _ => format!("{v:.2}"),
    }
}

/// The value of `peer` in the same repetition and workload as `run`.
fn paired<'a>(runs: &'a [Run], run: &Run, peer: Peer) -> Option<&'a Run> {
    runs.iter().find(|r| r.repetition == run.repetition && r.workload == run.workload && r.peer == peer)
}

/// Median over repetitions of `lb / peer`, per repetition.
pub fn paired_ratio(runs: &[Run], lb: Peer, peer: Peer, workload: super::workloads::Workload) -> Option<f64> {
    let ratios: Vec<f64> = runs
        .iter()
        .filter(|r| r.workload == workload && r.peer == lb)
        .filter_map(|r| Some(r.value / paired(runs, r, peer)?.value.max(f64::MIN_POSITIVE)))
        .collect();
    (!ratios.is_empty()).then(|| median(ratios.into_iter()))
}

pub fn print_summary(results: &Results) {
    let runs = &results.runs;
    println!("\nsummary: medians over {} repetition(s), spread = min..max", results.options.repetitions);
    for workload in WORKLOADS {
        println!("\n{} ({})", workload.name(), workload.unit());
        println!("  {:<16} {:>10} {:>21} {:>14} {:>14}", "peer", "median", "spread", "NAT / peer", "DSR / peer");
        for peer in PEERS {
            let values: Vec<f64> =
                runs.iter().filter(|r| r.workload == workload && r.peer == peer).map(|r| r.value).collect();
            if values.is_empty() {
                continue;
            }
            let (min, max) = values.iter().fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
            let ratio = |lb| match paired_ratio(runs, lb, peer, workload) {
                Some(r) if peer != lb => format!("{r:.2}x"),
                _ => "-".to_string(),
            };
            println!(
                "  {:<16} {:>10} {:>21} {:>14} {:>14}",
                peer.name(),
                figure(median(values.iter().copied())),
                format!("{}..{}", figure(min), figure(max)),
                ratio(Peer::LbNat),
                ratio(Peer::LbDsr)
            );
        }
    }
    for (what, why) in &results.skipped {
        println!("\n{what}: skipped: {why}");
    }
    println!(
        "\nThe lab's limits: every packet crosses veth pairs and a bridge (copied into an XDP buffer on each \
         receiving veth that runs a program), and 2 cores run the generator, the balancer and the backends: \
         read each figure with its CPU and drop columns above."
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::lab::observe::Observed;
    use crate::bench::lab::workloads::Workload;

    fn run(repetition: usize, peer: Peer, value: f64) -> Run {
        Run {
            repetition,
            workload: Workload::Udp,
            peer,
            value,
            sent: 0.0,
            delivered: 0.0,
            observed: Observed::default(),
        }
    }

    #[test]
    fn ratios_are_paired_within_a_repetition() {
        // The machine was twice as fast in repetition 2: paired ratios stay 2x, while the
        // ratio of medians over unpaired runs would not be.
        let runs = vec![
            run(1, Peer::LbNat, 200.0),
            run(1, Peer::NftDnat, 100.0),
            run(2, Peer::LbNat, 400.0),
            run(2, Peer::NftDnat, 200.0),
            run(3, Peer::LbNat, 300.0),
        ];
        assert_eq!(paired_ratio(&runs, Peer::LbNat, Peer::NftDnat, Workload::Udp), Some(2.0));
        assert_eq!(paired_ratio(&runs, Peer::LbNat, Peer::HaproxyTcp, Workload::Udp), None);
    }

    #[test]
    fn figures_are_short() {
        assert_eq!(figure(1_234_567.0), "1.23M");
        assert_eq!(figure(45_678.0), "45.7k");
        assert_eq!(figure(2004.0), "2004");
        assert_eq!(figure(0.923), "0.92");
    }
}
