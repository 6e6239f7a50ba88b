//! The fuzz step's short pass for the test command: the same seeded generator and checks as
//! `cargo xtask fuzz` (which sends a million frames and more), on fewer frames. Needs root.
use lb_tests::fixture::{balancer, configure, lab, vips};
use lb_tests::fixture6::{configure6, lab6, vips6};
use lb_tests::netns::ifindex;
use lb_tests::privileges::require_root;

const FRAMES: u64 = 50_000;
const SEED: u64 = 0x1b_f0_22;

#[test]
fn seeded_random_and_mutated_frames() {
    if !require_root("seeded_random_and_mutated_frames") {
        return;
    }
    let ns = lab();
    let _inside = ns.enter();
    let mut dp = balancer();
    let vips = vips();
    configure(&mut dp, &vips);
    short_pass(&mut dp, &lb_tests::fuzz::ipv4(&vips));
}

/// The same over the IPv6 fixture: IPv6 VIPs in every forwarding mode (and an IPv4 VIP over
/// IPv6 backends), frames of both families.
#[test]
fn seeded_random_and_mutated_ipv6_frames() {
    if !require_root("seeded_random_and_mutated_ipv6_frames") {
        return;
    }
    let ns = lab6();
    let _inside = ns.enter();
    let mut dp = balancer();
    let vips = vips6();
    configure6(&mut dp, &vips);
    short_pass(&mut dp, &lb_tests::fuzz::ipv6(&vips));
}

/// `FRAMES` frames through the balancer (in the fixture's namespace), which must reach both
/// kinds of frames: ones for no VIP and ones sent on.
fn short_pass(dp: &mut lb_ctl::dataplane::aya::AyaDataplane, targets: &lb_tests::fuzz::Targets) {
    let report = lb_tests::fuzz::run(dp, targets, ifindex("g0"), FRAMES, SEED).unwrap_or_else(|e| panic!("{e}"));
    println!("{report:?}\n{}", lb_tests::fuzz::summary(dp));
    assert_eq!(report.frames, FRAMES);
    assert!(
        report.not_ours > FRAMES / 10 && report.actions[3] > FRAMES / 10,
        "the generator must reach both kinds of frames: {report:?}"
    );
}
