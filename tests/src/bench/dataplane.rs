//! Data-plane benchmark (`cargo xtask bench dataplane`, root): ns per packet of each path of
//! lb_ingress and the extra over a bare XDP_PASS program measured in the same run.
//!
//! Method: kernel run-time statistics on (BPF_ENABLE_STATS), many single BPF_PROG_TEST_RUN calls
//! alternating the bare program and ours call by call, each one's run_time_ns / run_cnt per
//! round, medians over rounds. Single runs, because with repeat > 1 the kernel does not reset
//! the packet and a rewriting path would time its own output. For the new-flow path the flow
//! is deleted between calls, outside the timed region.
//!
//! Flow protection is on for every row: the new-flow budget is checked on every table miss
//! (set to u32::MAX so it is never spent, except in the row that measures a spent budget), and
//! the first-packet rows run into a set with free ways unless the row says otherwise.
use crate::fixture::{CLIENT, SEED, balancer, configure, lab, vips};
use crate::netns::ifindex;
use crate::packets::{Frame, L4};
use crate::testrun::{action_name, run_xdp};
use aya::maps::{Array, MapData};
use aya::programs::Xdp;
use aya::sys::{Stats, enable_stats};
use lb_common::config::DataplaneConfig;
use lb_common::flow::{FLOW_WAYS, FlowKey, FlowSet, ForwardSet, ReverseSet};
use lb_common::{family, ip_proto, ipv4_bytes, map_names, program_names};
use lb_ctl::dataplane::Dataplane as _;
use lb_ctl::dataplane::load::{load_decap, program};

const ROUNDS: usize = 31;
const CALLS_PER_ROUND: usize = 2000;

pub(super) struct Path {
    pub(super) name: &'static str,
    pub(super) frame: Vec<u8>,
    pub(super) action: u32,
    /// Flow to forget before each call (new-flow paths): the FLOWS set of its key and, for
    /// NAT, the REVERSE_FLOWS set of its reply's key. Those sets are emptied.
    pub(super) forget: Option<(u32, Option<u32>)>,
    pub(super) target: Option<f64>,
    pub(super) katran: Option<f64>,
    /// `DataplaneConfig::new_flow_budget` while this row runs.
    pub(super) budget: u32,
    /// `DataplaneConfig::share_flows` while this row runs (recorded flows are reported).
    pub(super) share: bool,
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

/// Empties connection-table set `set`.
fn forget<V: Copy + Default>(table: &mut Array<MapData, FlowSet<V>>, set: &u32) -> anyhow::Result<()>
where
    FlowSet<V>: aya::Pod,
{
    table.set(*set, FlowSet::default(), 0)?;
    Ok(())
}

/// One path's figure: extra ns per packet over the bare program (median), and Katran's
/// reference figure for the same path (a separate measurement, see README).
#[derive(Clone, Debug, serde::Serialize)]
pub struct PathCost {
    pub path: String,
    pub extra_ns: f64,
    pub katran_ns: Option<f64>,
}

/// Every path of both families: the IPv4 rows, then the IPv6 rows (each family in a balancer and
/// namespace of its own), then the ratios the targets are stated in.
pub fn run() -> anyhow::Result<Vec<PathCost>> {
    anyhow::ensure!(unsafe { libc::geteuid() } == 0, "the data-plane benchmark needs root");
    let mut costs = ipv4_rows()?;
    println!();
    costs.extend(super::dataplane6::ipv6_rows()?);
    let extra = |name: &str| costs.iter().find(|c| c.path == name).map(|c| c.extra_ns);
    if let (Some(v6), Some(v4)) = (extra(super::dataplane6::ESTABLISHED_NAT66), extra("established TCP (NAT)")) {
        println!("IPv6 / IPv4, established TCP (NAT): {:.2}x (target <= 1.2x)", v6 / v4);
    }
    if let (Some(v6), Some(v4)) = (extra(super::dataplane6::ESTABLISHED_IP6IP6), extra("IPIP encapsulation (DSR)")) {
        println!("IPv6 / IPv4, established DSR by IP in IP: {:.2}x (target <= 1.2x)", v6 / v4);
    }
    if let (Some(gue), Some(ipip)) = (extra("GUE encapsulation (DSR)"), extra("IPIP encapsulation (DSR)")) {
        println!("GUE - IPIP, established (IPv4): {:+.1} ns (target <= 15 ns)", gue - ipip);
    }
    if let (Some(gue), Some(ipip)) =
        (extra(super::dataplane6::ESTABLISHED_GUE6), extra(super::dataplane6::ESTABLISHED_IP6IP6))
    {
        println!("GUE - IP in IP, established (IPv6): {:+.1} ns (target <= 15 ns)", gue - ipip);
    }
    Ok(costs)
}

fn ipv4_rows() -> anyhow::Result<Vec<PathCost>> {
    let ns = lab();
    let _inside = ns.enter();
    let g0 = ifindex("g0");
    let mut dp = balancer();
    let vips = vips();
    configure(&mut dp, &vips);
    // The shared-flow row's reports, drained after every round as the daemon's sender would.
    let mut events = dp.take_flow_events();
    let mut tables = Tables::take(&mut dp)?;
    let mut decap = load_decap()?;
    let bare: &Xdp = program(&mut decap, program_names::PASS)?;

    let web = vips[0].addr;
    let syn = Frame::tcp(CLIENT, 45001, web, 80);
    let new_flow_key = FlowKey {
        src: ipv4_bytes(CLIENT),
        dst: ipv4_bytes(web),
        src_port: 45001u16.to_be(),
        dst_port: 80u16.to_be(),
        protocol: ip_proto::TCP,
        family: family::IPV4,
        _pad: [0; 2],
    };
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
            katran: Some(60.0),
            budget: UNSPENT,
            share: false,
        },
        Path {
            name: "established TCP (NAT)",
            frame: established(Frame::tcp(CLIENT, 45000, web, 80)),
            action: 3,
            forget: None,
            target: Some(100.0),
            katran: Some(153.0),
            budget: UNSPENT,
            share: false,
        },
        Path {
            name: "new TCP flow (SYN, NAT)",
            frame: syn.bytes(),
            action: 3,
            forget: Some((dp.flow_set_of(&new_flow_key), Some(dp.flow_set_of(&reply_key)))),
            target: Some(250.0),
            katran: Some(387.0),
            budget: UNSPENT,
            share: false,
        },
        Path {
            name: "new TCP flow (SYN, DSR)",
            frame: Frame::tcp(CLIENT, 46001, vips[2].addr, 80).bytes(),
            action: 3,
            forget: Some((dp.flow_set_of(&dsr_flow_key), None)),
            target: Some(250.0),
            katran: Some(387.0),
            budget: UNSPENT,
            share: false,
        },
        Path {
            name: "new TCP flow (SYN, DSR, shared)",
            frame: Frame::tcp(CLIENT, 46001, vips[2].addr, 80).bytes(),
            action: 3,
            forget: Some((dp.flow_set_of(&dsr_flow_key), None)),
            target: None,
            katran: None,
            budget: UNSPENT,
            share: true,
        },
        Path {
            name: "SYN, NAT, budget spent",
            frame: syn.bytes(),
            action: 3,
            forget: Some((dp.flow_set_of(&new_flow_key), Some(dp.flow_set_of(&reply_key)))),
            target: None,
            katran: None,
            budget: 1,
            share: false,
        },
        Path {
            name: "SYN, NAT, set of proven flows",
            frame: shut_out,
            action: 3,
            forget: None,
            target: None,
            katran: None,
            budget: UNSPENT,
            share: false,
        },
        Path {
            name: "established UDP (NAT)",
            frame: Frame::udp(CLIENT, 5000, web, 53).bytes(),
            action: 3,
            forget: None,
            target: None,
            katran: Some(199.0),
            budget: UNSPENT,
            share: false,
        },
        Path {
            name: "IPIP encapsulation (DSR)",
            frame: established(Frame::tcp(CLIENT, 46000, vips[2].addr, 80)),
            action: 3,
            forget: None,
            target: None,
            katran: None,
            budget: UNSPENT,
            share: false,
        },
        Path {
            name: "GUE encapsulation (DSR)",
            frame: established(Frame::tcp(CLIENT, 46200, gue_vip, 80)),
            action: 3,
            forget: None,
            target: None,
            katran: None,
            budget: UNSPENT,
            share: false,
        },
        Path {
            name: "new TCP flow (SYN, GUE)",
            frame: Frame::tcp(CLIENT, 46201, gue_vip, 80).bytes(),
            action: 3,
            forget: Some((dp.flow_set_of(&gue_flow_key), None)),
            target: Some(250.0),
            katran: None,
            budget: UNSPENT,
            share: false,
        },
        Path {
            name: "MAC rewrite (DSR by MAC)",
            frame: established(Frame::tcp(CLIENT, 46100, l2_vip, 80)),
            action: 3,
            forget: None,
            target: None,
            katran: None,
            budget: UNSPENT,
            share: false,
        },
        Path {
            name: "new TCP flow (SYN, L2)",
            frame: Frame::tcp(CLIENT, 46101, l2_vip, 80).bytes(),
            action: 3,
            forget: Some((dp.flow_set_of(&l2_flow_key), None)),
            target: Some(250.0),
            katran: None,
            budget: UNSPENT,
            share: false,
        },
    ];
    let ours: &Xdp = program(dp.ebpf_mut(), program_names::INGRESS)?;
    for port in &proven_ports {
        for l4 in [L4::TcpSyn, L4::TcpAck] {
            run_xdp(ours, &Frame::tcp(CLIENT, *port, web, 80).with(|f| f.l4 = l4).bytes(), g0);
        }
    }
    let mut drain = || while events.as_mut().and_then(|e| e.next()).is_some() {};
    measure(&paths, ours, bare, &mut tables, &mut drain, g0)
}

/// The maps a row changes: the connection tables (emptied for new-flow rows) and CONFIG.
pub(super) struct Tables {
    pub(super) flows: Array<MapData, ForwardSet>,
    pub(super) reverse: Array<MapData, ReverseSet>,
    pub(super) config: Array<MapData, DataplaneConfig>,
}

impl Tables {
    /// Takes the maps a row changes out of the balancer's object.
    pub(super) fn take(dp: &mut lb_ctl::dataplane::aya::AyaDataplane) -> anyhow::Result<Tables> {
        let mut take = |name: &str| dp.ebpf_mut().take_map(name).ok_or_else(|| anyhow::anyhow!("no map {name}"));
        Ok(Tables {
            flows: Array::try_from(take(map_names::FLOWS)?)?,
            reverse: Array::try_from(take(map_names::REVERSE_FLOWS)?)?,
            config: Array::try_from(take(map_names::CONFIG)?)?,
        })
    }
}

impl Tables {
    fn set_row(&mut self, path: &Path) -> anyhow::Result<()> {
        let current = self.config.get(&0, 0)?;
        let share_flows = u32::from(path.share);
        self.config.set(0, DataplaneConfig { new_flow_budget: path.budget, share_flows, ..current }, 0)?;
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

/// Checks every path takes its branch, then times each: `ours` and `bare` alternately, call by
/// call, medians over rounds. `drain` empties what a round left for userspace (shared flows).
pub(super) fn measure(
    paths: &[Path],
    ours: &Xdp,
    bare: &Xdp,
    tables: &mut Tables,
    drain: &mut dyn FnMut(),
    ingress: u32,
) -> anyhow::Result<Vec<PathCost>> {
    // Warm up: establish the flows, and check each path takes the branch it is named after.
    for path in paths {
        tables.set_row(path)?;
        for _ in 0..2 {
            tables.forget(path)?;
            let r = run_xdp(ours, &path.frame, ingress);
            anyhow::ensure!(
                r.action == path.action,
                "{}: verdict {} (expected {})",
                path.name,
                action_name(r.action),
                action_name(path.action)
            );
        }
    }

    let _stats = enable_stats(Stats::RunTime)?;
    println!(
        "lb_ingress per-path cost, BPF_PROG_TEST_RUN single runs, {ROUNDS} rounds x {CALLS_PER_ROUND} calls, medians"
    );
    println!(
        "{:<36} {:>9} {:>9} {:>12} {:>10} {:>14}",
        "path", "ours ns", "bare ns", "extra ns", "target", "Katran extra"
    );
    let mut costs = Vec::new();
    for path in paths {
        tables.set_row(path)?;
        let (mut b_state, mut o_state) = ((0, 0), (0, 0));
        ns_per_run(bare, &mut b_state);
        ns_per_run(ours, &mut o_state);
        let (mut b_all, mut o_all, mut extra) = (vec![], vec![], vec![]);
        for _ in 0..ROUNDS {
            for _ in 0..CALLS_PER_ROUND {
                run_xdp(bare, &path.frame, ingress);
                tables.forget(path)?;
                run_xdp(ours, &path.frame, ingress);
            }
            let b = ns_per_run(bare, &mut b_state);
            let o = ns_per_run(ours, &mut o_state);
            drain();
            b_all.push(b);
            o_all.push(o);
            extra.push(o - b);
        }
        println!(
            "{:<36} {:>9.1} {:>9.1} {:>12.1} {:>10} {:>14}",
            path.name,
            median(o_all),
            median(b_all),
            median(extra.clone()),
            path.target.map_or("-".to_string(), |t| format!("<= {t:.0}")),
            path.katran.map_or("-".to_string(), |k| format!("{k:.0}"))
        );
        costs.push(PathCost { path: path.name.to_string(), extra_ns: median(extra), katran_ns: path.katran });
    }
    println!("(Katran: figures of a separate measurement, the same method on the same machine kind; not run here)");
    Ok(costs)
}
