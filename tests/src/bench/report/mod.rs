//! `lb-bench all --report DIR`: every benchmark in turn, then a self-contained HTML report
//! (charts inlined as SVG, the peers' configurations, the machine and the commit) and the raw
//! results as JSON, both in DIR.
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use serde::Serialize;

use super::dataplane::PathCost;
use super::flood::Row as FloodRow;
use super::flows::FlowsCost;
use super::lab::peers::{PEERS, Peer};
use super::lab::report::paired_ratio;
use super::lab::workloads::WORKLOADS;
use super::lab::{Options, Results};
use super::proxy::ProxyRun;
use super::stats::median;
use charts::{Bar, bars};

mod charts;

/// Where the figures were measured.
#[derive(Debug, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    pub nic: String,
    pub commit: String,
}

#[derive(Serialize)]
struct Everything<'a> {
    machine: &'a Machine,
    dataplane: &'a [PathCost],
    flows: &'a [FlowsCost],
    control: &'a str,
    proxy: &'a [ProxyRun],
    flood: &'a [FloodRow],
    lab: &'a Results,
    /// The same lab with the balancer's veth at one queue (`lab` has two).
    lab_one_queue: Option<&'a Results>,
}

pub fn run_all(dir: &Path, lab_options: Options) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let machine = machine();
    println!("==> bench dataplane");
    let dataplane = super::dataplane::run()?;
    println!("==> bench flows");
    let flows = super::flows::run(None, None, None, false)?;
    println!("==> bench control");
    let control = control_text()?;
    println!("==> bench proxy");
    let proxy = super::proxy::run()?;
    println!("==> bench flood");
    let flood = super::flood::run(super::flood::Options::quick())?;
    println!("==> bench lab");
    let lab = super::lab::run(lab_options)?;
    println!("==> bench lab --balancer-queues 1");
    let lab_one_queue = super::lab::run(Options { balancer_queues: 1, profile: false, ..lab_options })?;
    let all = Everything {
        machine: &machine,
        dataplane: &dataplane,
        flows: &flows,
        control: &control,
        proxy: &proxy,
        flood: &flood,
        lab: &lab,
        lab_one_queue: Some(&lab_one_queue),
    };
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(&all)?)?;
    let page = html(&all);
    std::fs::write(dir.join("report.html"), &page.body)?;
    let charts = dir.join("charts");
    std::fs::create_dir_all(&charts)?;
    for (file, svg) in &page.charts {
        std::fs::write(charts.join(file), svg)?;
    }
    println!(
        "report: {} (raw results: {}; each chart as SVG in {})",
        dir.join("report.html").display(),
        dir.join("results.json").display(),
        charts.display()
    );
    Ok(())
}

/// The control-plane benchmark prints its figures only: run it as a child and keep its text.
fn control_text() -> Result<String> {
    let out = Command::new(std::env::current_exe()?).arg("control").output().context("lb-bench control")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{text}");
    anyhow::ensure!(out.status.success(), "lb-bench control failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(text)
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':').map(|(_, v)| v.trim().to_string()))
        .unwrap_or_else(|| "unknown".into());
    let run = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "unknown".into())
    };
    let workspace = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut commit = run("git", &["-C", workspace, "rev-parse", "--short=12", "HEAD"]);
    if !run("git", &["-C", workspace, "status", "--porcelain", "--untracked-files=no"]).is_empty() {
        commit.push_str(" (with uncommitted changes)");
    }
    Machine {
        cpu,
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        kernel: run("uname", &["-r"]),
        nic: "veth pairs and a bridge in network namespaces (the lab); no physical NIC".into(),
        commit,
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The report page as it is built: the HTML body, and each chart also on its own (SVG), to be
/// written next to the page for the README and other documents to show.
#[derive(Default)]
struct Page {
    body: String,
    charts: Vec<(String, String)>,
}

impl Page {
    fn push_str(&mut self, text: &str) {
        self.body.push_str(text);
    }

    /// Adds a chart to the page, kept also as `<slug of title>.svg`.
    fn chart(&mut self, title: &str, unit: &str, data: &[Bar], marker_name: Option<&str>) {
        let svg = bars(title, unit, data, marker_name);
        self.body.push_str(&svg);
        let slug: String = title
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
            .collect::<String>()
            .split('-')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join("-");
        self.charts.push((format!("{slug}.svg"), svg));
    }
}

fn html(all: &Everything) -> Page {
    let m = all.machine;
    let mut body = Page::default();
    body.push_str(&format!(
        "<h1>lb-ctl benchmarks</h1>\n<p>Commit {}; {} ({} cores), kernel {}; network: {}. Benchmarks print figures and \
         assert nothing; peers and floors are measured in the same run.</p>\n",
        escape(&m.commit),
        escape(&m.cpu),
        m.cores,
        escape(&m.kernel),
        escape(&m.nic)
    ));

    body.push_str("<h2>Data plane: extra ns per packet over a bare XDP_PASS</h2>\n");
    let dp: Vec<Bar> = all
        .dataplane
        .iter()
        .map(|p| Bar { label: p.path.clone(), value: p.extra_ns, spread: None, marker: p.katran_ns })
        .collect();
    body.chart(
        "lb_ingress per path (BPF_PROG_TEST_RUN, medians)",
        "ns / packet",
        &dp,
        all.dataplane.iter().any(|p| p.katran_ns.is_some()).then_some("Katran (same run)"),
    );

    if !all.flows.is_empty() {
        body.push_str("<h2>Data plane: ns per packet against the number of flows</h2>\n");
        body.push_str(
            "<p>Bars: the connection table sized for a million flows throughout; markers: a table sized to the count. \
             Their difference is the table's memory footprint alone (BPF arrays are mapped with 4 KiB pages, and in a \
             virtual machine a TLB miss walks two page tables).</p>\n",
        );
        let report_path = super::flows::PATHS[0].name;
        let shown: Vec<&FlowsCost> = all.flows.iter().filter(|f| f.path == report_path).collect();
        let full = shown.iter().map(|f| f.table_ways).max().unwrap_or(0);
        let fbars: Vec<Bar> = shown
            .iter()
            .filter(|f| f.table_ways == full)
            .map(|f| Bar {
                label: format!("{} flows", f.flows),
                value: f.extra_ns,
                spread: None,
                marker: shown.iter().find(|s| s.flows == f.flows && s.table_ways != full).map(|s| s.extra_ns),
            })
            .collect();
        body.chart(
            "established UDP (NAT), flows taken in scattered order",
            "extra ns / packet",
            &fbars,
            Some("table sized to the flows"),
        );
    }

    body.push_str("<h2>Lab: through a running balancer, next to its peers</h2>\n");
    let lab = all.lab;
    body.push_str(&format!(
        "<p>{} repetition(s) of {} s per run, interleaved; bars are medians, whiskers min..max.</p>\n",
        lab.options.repetitions, lab.options.seconds
    ));
    for workload in WORKLOADS {
        let wbars: Vec<Bar> = PEERS
            .iter()
            .filter_map(|&peer| {
                let v: Vec<f64> =
                    lab.runs.iter().filter(|r| r.workload == workload && r.peer == peer).map(|r| r.value).collect();
                let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(*x), b.max(*x)));
                (!v.is_empty()).then(|| Bar {
                    label: peer.name().into(),
                    value: median(v.into_iter()),
                    spread: Some((lo, hi)),
                    marker: None,
                })
            })
            .collect();
        if wbars.is_empty() {
            continue;
        }
        body.chart(workload.name(), workload.unit(), &wbars, None);
        // Ratios paired within each repetition (lb-ctl NAT's figure over the peer's), median.
        let rbars: Vec<Bar> = PEERS
            .iter()
            .filter(|&&peer| peer != Peer::LbNat)
            .filter_map(|&peer| {
                let ratio = paired_ratio(&lab.runs, Peer::LbNat, peer, workload)?;
                Some(Bar { label: peer.name().into(), value: ratio, spread: None, marker: Some(1.0) })
            })
            .collect();
        if !rbars.is_empty() {
            body.chart(
                &format!("{}: lb-ctl XDP NAT / peer", workload.name()),
                "ratio (paired, median)",
                &rbars,
                Some("1.0 (even)"),
            );
        }
    }
    if let Some(one) = all.lab_one_queue {
        queues_section(&mut body, one, lab);
    }
    for p in &lab.profiles {
        body.push_str(&format!(
            "<h3>Profile: {}</h3>\n<p>perf record, cpu-clock samples on every CPU during one run: what the figure's \
             CPUs did.</p>\n<pre>{}\n\n{}</pre>\n",
            escape(&p.what),
            escape(&p.by_command),
            escape(&p.by_symbol)
        ));
    }
    for (what, why) in &lab.skipped {
        body.push_str(&format!("<p>{}: skipped: {}</p>\n", escape(what), escape(why)));
    }
    body.push_str("<h3>Every run (sent, delivered, drops, CPUs)</h3>\n<pre>");
    for r in &lab.runs {
        body.push_str(&escape(&format!(
            "rep {} {:<26} {:<16} {:>12.1} {}  sent {:.0} delivered {:.0}  {}\n",
            r.repetition,
            r.workload.name(),
            r.peer.name(),
            r.value,
            r.workload.unit(),
            r.sent,
            r.delivered,
            r.observed.summary()
        )));
    }
    body.push_str("</pre>\n<h3>Configurations</h3>\n");
    for (name, text) in &lab.configs {
        body.push_str(&format!("<h4>{}</h4>\n<pre>{}</pre>\n", escape(name), escape(text)));
    }

    body.push_str("<h2>lb-proxy against nginx and HAProxy (wrk, loopback)</h2>\n");
    // Latency charts of the request workloads (a bulk transfer has no request latency).
    let mut tests: Vec<&str> = all.proxy.iter().filter(|r| r.unit == "req").map(|r| r.test.as_str()).collect();
    tests.dedup();
    for test in tests {
        let mut peers: Vec<&str> = all.proxy.iter().filter(|r| r.test == test).map(|r| r.peer.as_str()).collect();
        peers.sort();
        peers.dedup();
        let pbars: Vec<Bar> = peers
            .iter()
            .map(|peer| {
                let runs: Vec<&ProxyRun> = all.proxy.iter().filter(|r| r.test == test && r.peer == *peer).collect();
                Bar {
                    label: peer.to_string(),
                    value: median(runs.iter().map(|r| r.p50_ms)),
                    spread: None,
                    marker: Some(median(runs.iter().map(|r| r.p99_ms))),
                }
            })
            .collect();
        body.chart(&format!("{test}: latency p50 (bars) and p99"), "ms", &pbars, Some("p99"));
    }
    if !all.flood.is_empty() {
        body.push_str(
            "<h2>Established connections under a SYN flood</h2>\n<p>Keep-alive connections kept and broken while \
             spoofed SYNs flood the balancer and a backend joins halfway; leaked: replies reaching the client with a \
             backend's own address.</p>\n<pre>",
        );
        for r in all.flood {
            body.push_str(&escape(&format!(
                "{:<28} {:<8} sent {:>8.0} pps  kept {:>2}  broken {:>2}  leaked {}  {}\n",
                r.balancer, r.offered, r.sent_pps, r.kept, r.broken, r.leaked, r.notes
            )));
        }
        body.push_str("</pre>\n");
    }
    body.push_str(&format!("<h2>Control plane</h2>\n<pre>{}</pre>\n", escape(all.control)));
    body.body = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>lb-ctl benchmarks</title>\n<style>body{{font-family:sans-serif;\
         max-width:1100px;margin:2em auto}} pre{{background:#f4f4f4;padding:.6em;overflow-x:auto;font-size:12px}} \
         svg{{display:block;margin:1em 0}}</style></head><body>\n{}</body></html>\n",
        body.body
    );
    body
}

/// Each balancer's medians with its veth at one queue and at two, per workload: what a second
/// queue (a second CPU taking the balancer's softirq work) is worth in this lab.
fn queues_section(page: &mut Page, one: &Results, two: &Results) {
    page.push_str(&format!(
        "<h3>One receive queue against {}</h3>\n<p>The same runs with the balancer's veth at one queue.</p>\n",
        two.options.balancer_queues
    ));
    let median_of = |results: &Results, workload, peer| {
        let v: Vec<f64> =
            results.runs.iter().filter(|r| r.workload == workload && r.peer == peer).map(|r| r.value).collect();
        (!v.is_empty()).then(|| median(v.into_iter()))
    };
    for workload in WORKLOADS {
        let mut data = Vec::new();
        for peer in PEERS {
            for (results, queues) in [(one, one.options.balancer_queues), (two, two.options.balancer_queues)] {
                if let Some(value) = median_of(results, workload, peer) {
                    data.push(Bar { label: format!("{}, {queues} q", peer.name()), value, spread: None, marker: None });
                }
            }
        }
        if !data.is_empty() {
            page.chart(&format!("{}: 1 against 2 queues", workload.name()), workload.unit(), &data, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::lab::Run;
    use crate::bench::lab::workloads::Workload;

    #[test]
    fn the_report_is_one_page_with_every_chart() {
        let machine =
            Machine { cpu: "cpu <x>".into(), cores: 2, kernel: "k".into(), nic: "veth".into(), commit: "abc".into() };
        let run = |peer, value| Run {
            repetition: 1,
            workload: Workload::Udp,
            peer,
            value,
            sent: value,
            delivered: value,
            observed: Default::default(),
        };
        let lab = Results {
            options: Options::quick(),
            configs: vec![("nft".into(), "table ip t {}".into())],
            skipped: vec![("IPVS".into(), "not here".into())],
            runs: vec![run(Peer::LbNat, 200.0), run(Peer::NftDnat, 100.0)],
            profiles: vec![super::super::lab::profile::Profile {
                what: "UDP <x>".into(),
                by_command: "50% trafgen".into(),
                by_symbol: "20% veth_xdp_rcv".into(),
            }],
        };
        let dataplane = [PathCost { path: "non-VIP pass".into(), extra_ns: 20.0, katran_ns: Some(60.0) }];
        let all = Everything {
            machine: &machine,
            dataplane: &dataplane,
            flows: &[],
            control: "control <text>",
            proxy: &[],
            flood: &[FloodRow {
                balancer: "lb-ctl <NAT>".into(),
                offered: "max".into(),
                sent_pps: 1.0,
                kept: 10,
                broken: 0,
                leaked: 0,
                notes: String::new(),
            }],
            lab: &lab,
            lab_one_queue: Some(&lab),
        };
        let Page { body: page, charts } = html(&all);
        assert_eq!(charts.len(), 4, "dataplane, UDP's figures, ratios and queues");
        assert!(
            charts.iter().any(|(file, _)| file == "lb-ingress-per-path-bpf-prog-test-run-medians.svg"),
            "{:?}",
            charts.iter().map(|c| &c.0).collect::<Vec<_>>()
        );
        assert!(page.starts_with("<!doctype html>") && page.ends_with("</html>\n"));
        assert!(page.contains("lb-ctl &lt;NAT&gt;"), "flood rows are escaped and shown");
        assert!(page.contains("Profile: UDP &lt;x&gt;") && page.contains("veth_xdp_rcv"), "profiles are shown");
        assert!(page.contains("cpu &lt;x&gt;") && page.contains("control &lt;text&gt;"), "text is escaped");
        assert!(page.contains("lb-ctl XDP NAT / peer") && page.contains("IPVS: skipped"));
        assert_eq!(
            page.matches("<svg").count(),
            4,
            "dataplane, and UDP's figures, ratios and queues (no other workload ran)"
        );
    }
}
