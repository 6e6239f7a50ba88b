//! How much of the verifier's budget each program of the balancer takes. The kernel refuses a
//! program whose verification walks more than a million instructions, and the walk's length
//! moves with the code in ways that are hard to foresee (leaving code out has lengthened it
//! past the limit) and with the kernel's verifier. This test fails while there is still room,
//! so that a change eating the margin is seen here, on the suites' kernel, and not on an
//! operator's.
use lb_common::program_names;
use lb_ctl::dataplane::load::program;
use lb_tests::fixture::balancer;
use lb_tests::privileges::require_root;

/// The kernel's budget: instructions the verifier may walk for one program
/// (`BPF_COMPLEXITY_LIMIT_INSNS`).
const VERIFIER_BUDGET: u32 = 1_000_000;
/// The share of it a program may take here: the rest is the margin for other kernels and for
/// the next change.
const MOST_OF_BUDGET: f64 = 0.9;

#[test]
fn programs_verify_well_within_the_verifiers_budget() {
    if !require_root("programs_verify_well_within_the_verifiers_budget") {
        return;
    }
    let mut dp = balancer();
    let mut over = Vec::new();
    for name in [
        program_names::INGRESS,
        program_names::INGRESS_V6,
        program_names::ICMP_ERRORS,
        program_names::ICMP6_ERRORS,
        program_names::TOO_BIG6,
        program_names::TRACE,
    ] {
        let info = program(dp.ebpf_mut(), name).unwrap().info().unwrap();
        let walked = info.verified_instruction_count().expect("the kernel reports verified instructions");
        let share = f64::from(walked) / f64::from(VERIFIER_BUDGET);
        println!("{name}: {walked} instructions verified, {:.0}% of the budget", 100.0 * share);
        if share > MOST_OF_BUDGET {
            over.push(format!("{name}: {walked}"));
        }
    }
    assert!(
        over.is_empty(),
        "programs past {:.0}% of the verifier's budget of {VERIFIER_BUDGET}: {over:?}",
        100.0 * MOST_OF_BUDGET
    );
}
