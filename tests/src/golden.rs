//! The golden-packet cases' machinery, shared by the golden suites: a case (input frame →
//! verdict, exact output, counters), running one through lb_ingress with BPF_PROG_TEST_RUN,
//! and the expected outputs built independently with etherparse.
use std::collections::HashMap;

use aya::programs::Xdp;
use lb_common::flow::FlowKey;
use lb_common::stats::Counter;
use lb_common::{ip_proto, ipv4_bytes, program_names};
use lb_ctl::dataplane::Dataplane;
use lb_ctl::dataplane::aya::AyaDataplane;
use lb_ctl::dataplane::load::program;

use crate::packets::{Family, Frame, Mac, verify_checksums};
use crate::testrun::{RunResult, action_name, run_xdp};

pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;
pub const XDP_REDIRECT: u32 = 4;

/// Verdict counters no fixture can reach: growing the frame for IPIP only fails without
/// headroom, which BPF_PROG_TEST_RUN (and every driver with native XDP) always provides.
pub const UNREACHABLE_HERE: &[Counter] = &[Counter::DropEncapFailed];

pub struct Case {
    pub name: &'static str,
    pub input: Vec<u8>,
    pub action: u32,
    /// None: the output must equal the input.
    pub output: Option<Vec<u8>>,
    pub verdict: Counter,
    /// Event counters that must rise by one.
    pub events: Vec<Counter>,
    /// Event counters that must not move.
    pub unchanged: Vec<Counter>,
}

pub fn case(name: &'static str, input: Vec<u8>, action: u32, output: Option<Vec<u8>>, verdict: Counter) -> Case {
    Case { name, input, action, output, verdict, events: vec![], unchanged: vec![] }
}

pub fn counters(dp: &AyaDataplane) -> HashMap<Counter, u64> {
    dp.counters().unwrap().into_iter().collect()
}

pub fn is_verdict(c: Counter) -> bool {
    let n = c.name();
    n.starts_with("pass_") || n.starts_with("drop_") || n.starts_with("forward_")
}

/// Runs one case; returns a description of what went wrong, if anything.
pub fn check(prog: &Xdp, dp: &AyaDataplane, ingress: u32, c: &Case) -> Result<(), String> {
    let before = counters(dp);
    let RunResult { action, output } = run_xdp(prog, &c.input, ingress);
    let after = counters(dp);
    if action != c.action {
        return Err(format!("verdict {} want {}", action_name(action), action_name(c.action)));
    }
    let want = c.output.as_ref().unwrap_or(&c.input);
    if &output != want {
        return Err(format!("output differs\n  got  {}\n  want {}", hex(&output), hex(want)));
    }
    if c.output.is_some() {
        verify_checksums(&output)?;
    }
    let delta = |k: Counter| after[&k] - before[&k];
    let verdicts: u64 = Counter::ALL.iter().filter(|k| is_verdict(**k)).map(|k| delta(*k)).sum();
    if delta(c.verdict) != 1 || verdicts != 1 {
        return Err(format!(
            "counter {} rose by {}, all verdict counters by {verdicts}",
            c.verdict.name(),
            delta(c.verdict)
        ));
    }
    for e in &c.events {
        if delta(*e) != 1 {
            return Err(format!("event counter {} rose by {}", e.name(), delta(*e)));
        }
    }
    for e in &c.unchanged {
        if delta(*e) != 0 {
            return Err(format!("event counter {} rose by {}, should not have moved", e.name(), delta(*e)));
        }
    }
    Ok(())
}

/// The FLOWS key of a TCP flow from `src:src_port` to `dst:dst_port`.
pub fn flow_key(src: [u8; 4], dst: [u8; 4], src_port: u16, dst_port: u16) -> FlowKey {
    FlowKey::new(
        ipv4_bytes(src),
        ipv4_bytes(dst),
        src_port.to_be(),
        dst_port.to_be(),
        ip_proto::TCP,
        lb_common::family::IPV4,
    )
}

/// The balancer under test and the outcome of every case run on it.
pub struct Golden {
    pub dp: AyaDataplane,
    /// The interface the frames arrive on.
    pub ingress: u32,
    pub results: Vec<(&'static str, Result<(), String>)>,
}

impl Golden {
    /// Runs one case and keeps its outcome.
    pub fn run(&mut self, c: Case) {
        self.results.push((c.name, run_case(&mut self.dp, self.ingress, &c)));
    }

    /// The cases that failed, each as `name: why`.
    pub fn failures(&self) -> Vec<String> {
        self.results.iter().filter_map(|(name, r)| r.as_ref().err().map(|e| format!("{name}: {e}"))).collect()
    }
}

/// Runs one case through the balancer's lb_ingress and prints its outcome.
pub fn run_case(dp: &mut AyaDataplane, ingress: u32, c: &Case) -> Result<(), String> {
    let prog: &Xdp = program(dp.ebpf_mut(), program_names::INGRESS).unwrap();
    let prog_ptr = prog as *const Xdp;
    // SAFETY: the program lives in dp's Ebpf, which outlives this call and is not moved.
    let outcome = check(unsafe { &*prog_ptr }, dp, ingress, c);
    println!("{:<58} {}", c.name, if outcome.is_ok() { "ok" } else { "FAILED" });
    outcome
}

/// The program array the ingress programs jump through, to take a program out and put it back.
pub fn jumps(dp: &mut AyaDataplane) -> aya::maps::ProgramArray<&mut aya::maps::MapData> {
    aya::maps::ProgramArray::try_from(dp.ebpf_mut().map_mut(lb_common::map_names::JUMPS).unwrap()).unwrap()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The expected NAT output (NAT44 or NAT66): addresses/ports rewritten, TTL (hop limit) one
/// less, MACs of the next hop.
pub fn nat_out<A: Family>(input: &Frame<A>, src: (A, u16), dst: (A, u16), smac: Mac, dmac: Mac) -> Vec<u8> {
    input
        .with(|f| {
            (f.src, f.src_port) = src;
            (f.dst, f.dst_port) = dst;
            f.ttl -= 1;
            f.src_mac = smac;
            f.dst_mac = dmac;
        })
        .bytes()
}

/// A case of lb_decap: name, input frame, the exact output (lb_decap always passes), and the
/// counter it must move.
pub type DecapCase = (&'static str, Vec<u8>, Vec<u8>, lb_common::stats::DecapCounter);

/// Runs every case through the loaded lb_decap, prints each outcome, then checks every counter
/// moved exactly as the cases say; panics naming the failed cases.
pub fn run_decap_cases(ebpf: &mut aya::Ebpf, cases: &[DecapCase]) {
    use lb_common::stats::DecapCounter;
    let prog: &Xdp = program(ebpf, program_names::DECAP).unwrap();
    let mut failed = Vec::new();
    let mut seen = HashMap::new();
    for (name, input, want, counter) in cases {
        let r = run_xdp(prog, input, 1);
        let ok = r.action == XDP_PASS && &r.output == want;
        println!("{name:<64} {}", if ok { "ok" } else { "FAILED" });
        if !ok {
            failed.push(format!("{name}: {} {}\n want {}", action_name(r.action), hex(&r.output), hex(want)));
        }
        *seen.entry(*counter).or_insert(0u64) += 1;
    }
    let map: aya::maps::PerCpuArray<_, u64> =
        aya::maps::PerCpuArray::try_from(ebpf.map(lb_common::map_names::DECAP_COUNTERS).unwrap()).unwrap();
    for c in DecapCounter::ALL {
        let total: u64 = map.get(&(*c as u32), 0).unwrap().iter().sum();
        assert_eq!(total, seen.get(c).copied().unwrap_or(0), "decap counter {}", c.name());
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
