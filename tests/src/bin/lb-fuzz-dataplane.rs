//! The fuzz step (`cargo xtask fuzz [FRAMES] [SEED]`, root): seeded random and mutated frames
//! through lb_ingress with BPF_PROG_TEST_RUN; see `lb_tests::fuzz` for what must hold. Exits
//! non-zero, naming the seed and the frame, at the first violation.
use lb_tests::fixture::{balancer, configure, lab, vips};
use lb_tests::fixture6::{configure6, lab6, vips6};
use lb_tests::netns::ifindex;

fn main() -> anyhow::Result<()> {
    anyhow::ensure!(unsafe { libc::geteuid() } == 0, "the fuzz step loads XDP programs: run it as root");
    let mut args = std::env::args().skip(1);
    let frames: u64 = args.next().map_or(Ok(1_000_000), |a| a.parse())?;
    let seed: u64 = match args.next() {
        Some(s) => u64::from_str_radix(s.trim_start_matches("0x"), 16)?,
        None => 0x5eed_f022,
    };
    for family in ["IPv4", "IPv6"] {
        // Each family's fixture in a balancer and namespace of its own.
        let ns = if family == "IPv4" { lab() } else { lab6() };
        let _inside = ns.enter();
        let mut dp = balancer();
        let targets = if family == "IPv4" {
            let vips = vips();
            configure(&mut dp, &vips);
            lb_tests::fuzz::ipv4(&vips)
        } else {
            let vips = vips6();
            configure6(&mut dp, &vips);
            lb_tests::fuzz::ipv6(&vips)
        };
        println!("fuzzing lb_ingress, {family} VIPs: {frames} frames, seed {seed:#x}");
        let started = std::time::Instant::now();
        let report = lb_tests::fuzz::run(&mut dp, &targets, ifindex("g0"), frames, seed).map_err(anyhow::Error::msg)?;
        let [aborted, drop, pass, tx, redirect] = report.actions;
        println!(
            "{} frames in {:.1} s: aborted {aborted}, drop {drop}, pass {pass}, tx {tx}, redirect {redirect}; {} concerned no VIP (all untouched)",
            report.frames,
            started.elapsed().as_secs_f64(),
            report.not_ours
        );
        println!("counters: {}", lb_tests::fuzz::summary(&dp));
    }
    Ok(())
}
