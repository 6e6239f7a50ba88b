//! `cargo xtask bench proxy --instructions`: user-space instructions per request of lb-proxy,
//! nginx and HAProxy on each request workload of `bench proxy`, with the same configurations.
//!
//! Hardware counters (`perf stat -e instructions:u`) are used where they exist; in a VM without
//! a PMU they do not, and every peer then runs under callgrind, which counts the instructions
//! each process executes in user space (Ir) whatever the machine's load. Each peer runs alone
//! under the counter, every process and thread of it counted; per workload a warm-up of
//! fixed size runs first, the counters are zeroed, a fixed number of requests runs, and the
//! counters are dumped. h2load makes the requests in every workload (HTTP/1.1 with `--h1`):
//! it stops after exactly `-n` requests, which wrk (timed runs) cannot.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use super::loads::{H2_CLIENTS, H2_STREAMS, parse_h2load_requests};
use super::wrk::stdout_of;
use super::{CONNECTIONS, Load, Ports, Procs, Rig, TESTS, WORKERS, peer_selected, selected, wait_ports};

/// Requests counted per workload, by its cost under callgrind (about 50x slower than native):
/// enough that per-connection work is spread as in a long run, short enough for a busy machine.
fn requests(load: Load, path: &str) -> u64 {
    match load {
        Load::Wrk { tls: true, close: true, .. } => 500,
        Load::Wrk { close: true, .. } => 2000,
        _ if path == "/300k" => 500,
        _ => 4000,
    }
}

/// The warm-up before the counted requests: connection pools filled, caches and allocator
/// arenas grown, TLS session caches primed.
fn warm_up(counted: u64) -> u64 {
    (counted / 4).max(200)
}

/// How long a peer under callgrind may take to start (it translates its code first).
const START_UNDER_CALLGRIND: Duration = Duration::from_secs(120);
/// The pause after a generator ends and before the counters are read or zeroed: the peer
/// finishes the connections' teardown, which belongs to the requests just made.
const SETTLE: Duration = Duration::from_secs(2);

/// One peer's count on one workload.
struct Count {
    peer: &'static str,
    test: &'static str,
    requests: u64,
    failed: u64,
    instructions: u64,
    processes: usize,
}

pub fn run() -> Result<()> {
    if let Some(why) = perf_counter_missing() {
        println!("counter: callgrind (valgrind), user-space instructions (Ir): {why}");
    } else {
        // The callgrind route counts the same thing and is the one this machine's figures
        // were taken with; a PMU only makes it faster, so it stays the one route.
        println!("counter: callgrind (valgrind), user-space instructions (Ir); perf's instructions:u also works here");
    }
    let mut rig = Rig::start()?;
    let out = tempfile::Builder::new().prefix("lb-bench-instructions-").tempdir()?.keep();
    // nginx's workers drop to `nobody` and write their dumps here too.
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
    println!(
        "each peer alone under: valgrind --tool=callgrind --trace-children=yes --fair-sched=yes --compress-strings=no --callgrind-out-file={}/PEER.%p --vgdb-prefix={}/vgdb PEER-COMMAND",
        out.display(),
        out.display()
    );
    println!(
        "per workload: h2load -n WARM-UP, {}s pause, counters zeroed (callgrind_control -z, every process of the peer), h2load -n N, {}s pause, counters dumped (callgrind_control -d)",
        SETTLE.as_secs(),
        SETTLE.as_secs()
    );
    let mut counts = Vec::new();
    for (peer, ports, mut cmd) in std::mem::take(&mut rig.peers).into_iter().filter(|(p, ..)| peer_selected(p)) {
        if peer == "nginx" {
            // nginx's workers would drop to `nobody`, out of callgrind_control's reach (it
            // waits for them for ever); this only keeps their user, not their request path.
            cmd.args(["-g", "user root;"]);
            println!("nginx under the counter: -g 'user root;' (its workers keep root's user)");
        }
        let valgrind = under_callgrind(&cmd, &out, peer);
        println!("--- {peer} under the counter ---\n{}", command_line(&valgrind));
        // A Procs of its own: the peer stops (and writes its last dump) before the next starts.
        let mut procs = Procs { logs: rig.dir.path().to_path_buf(), running: Vec::new() };
        procs.spawn(peer, valgrind)?;
        wait_ports(&ports, START_UNDER_CALLGRIND)?;
        let pid = procs.pid(peer).context("peer's pid")?;
        let mut shown = false;
        for test in TESTS.into_iter().filter(|t| t.load != Load::Bulk && selected(t.name)) {
            let n = requests(test.load, test.path);
            let warm = h2load(test.load, test.path, &ports, warm_up(n))?;
            ensure!(warm.1 == 0, "{peer}, {}: {} requests of the warm-up failed", test.name, warm.1);
            std::thread::sleep(SETTLE);
            let pids = process_tree(pid);
            if !std::mem::replace(&mut shown, true) {
                let threads: Vec<usize> = pids.iter().map(|p| threads(*p)).collect();
                println!("{peer}: every process counted: pids {pids:?}, threads {threads:?}");
            }
            for &p in &pids {
                callgrind_control("-z", p, &out)?;
            }
            let (done, failed) = h2load(test.load, test.path, &ports, n)?;
            std::thread::sleep(SETTLE);
            let slug: String = test
                .name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
                .collect();
            let mut instructions = 0;
            for &p in &pids {
                callgrind_control("-d", p, &out)?;
                let dump = last_dump(&out, peer, p)?;
                let text = std::fs::read_to_string(&dump)?;
                instructions += parse_callgrind_total(&text)
                    .with_context(|| format!("no `summary:` line in {}", dump.display()))?;
                // Kept under the workload's name, for callgrind_annotate.
                std::fs::rename(&dump, out.join(format!("{peer}.{slug}.{p}")))?;
            }
            let count = Count { peer, test: test.name, requests: done, failed, instructions, processes: pids.len() };
            print_count(&count);
            counts.push(count);
            procs.check_alive()?;
        }
    }
    print_summary(&counts);
    println!(
        "profiles (one file per process and workload): {}; e.g. callgrind_annotate {}/lb-proxy.http-1-kib.PID",
        out.display(),
        out.display()
    );
    Ok(())
}

/// Why `perf stat -e instructions:u` cannot count here (`None`: it can).
fn perf_counter_missing() -> Option<String> {
    let out = Command::new("perf").args(["stat", "-x,", "-e", "instructions:u", "--", "true"]).output();
    let Ok(out) = out else { return Some("perf is not installed".into()) };
    let text = String::from_utf8_lossy(&out.stderr);
    if text.contains("<not supported>") || text.contains("<not counted>") || !out.status.success() {
        return Some("`perf stat -e instructions:u` reports <not supported> (no hardware counters in this VM)".into());
    }
    None
}

fn under_callgrind(cmd: &Command, out: &Path, peer: &str) -> Command {
    let mut valgrind = Command::new("valgrind");
    valgrind
        .args(["--tool=callgrind", "--trace-children=yes", "--fair-sched=yes"])
        // Every dump names its functions in full: compressed, a name is written only in the
        // first dump that meets it, and a workload's dump kept alone reads as one function.
        .arg("--compress-strings=no")
        .arg(format!("--callgrind-out-file={}/{peer}.%p", out.display()))
        .arg(format!("--vgdb-prefix={}/vgdb", out.display()))
        .arg(cmd.get_program())
        .args(cmd.get_args());
    valgrind
}

fn command_line(cmd: &Command) -> String {
    std::iter::once(cmd.get_program()).chain(cmd.get_args()).map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

/// `pid` and its children (nginx's workers; HAProxy and lb-proxy are one process each).
pub(super) fn process_tree(pid: u32) -> Vec<u32> {
    let mut pids = vec![pid];
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    for task in tasks {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        pids.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
    }
    pids
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// The h2load run of a workload against `ports`, `n` requests: (succeeded, failed).
fn h2load(load: Load, path: &str, ports: &Ports, n: u64) -> Result<(u64, u64)> {
    let mut cmd = Command::new("h2load");
    cmd.args(["-t", &WORKERS.to_string(), "-n", &n.to_string()]);
    let url = match load {
        Load::H2 => {
            cmd.args(["-c", &H2_CLIENTS.to_string(), "-m", &H2_STREAMS.to_string()]);
            format!("http://127.0.0.1:{}{path}", ports.h2c)
        }
        Load::Wrk { tcp, tls, close } => {
            cmd.args(["--h1", "-c", &CONNECTIONS.to_string()]);
            if close {
                cmd.args(["-H", "Connection: close"]);
            }
            let (scheme, port) = match (tls, tcp) {
                (true, _) => ("https", ports.tls),
                (false, true) => ("http", ports.tcp),
                (false, false) => ("http", ports.http),
            };
            format!("{scheme}://127.0.0.1:{port}{path}")
        }
        Load::Bulk => bail!("bulk transfers have no requests to count"),
    };
    cmd.arg(url).stderr(Stdio::null());
    let text = stdout_of(cmd, "h2load")?;
    parse_h2load_requests(&text).with_context(|| format!("unexpected h2load output:\n{text}"))
}

/// `callgrind_control WHAT PID` (`-z` zero, `-d` dump) for one process of a peer.
/// Longest wait for callgrind_control's answer (valgrind runs a process ~50x slower).
const CONTROL_TIMEOUT_SECS: u64 = 60;

fn callgrind_control(what: &str, pid: u32, dir: &Path) -> Result<()> {
    hand_pipes_over(pid, dir)?;
    // Bounded: a process that never answers is an error, not a hung benchmark.
    let out = Command::new("timeout")
        .arg(CONTROL_TIMEOUT_SECS.to_string())
        .arg("callgrind_control")
        .arg(format!("--vgdb-prefix={}/vgdb", dir.display()))
        .arg(what)
        .arg(pid.to_string())
        .output()?;
    // It exits with 0 also when it found no such process: its "OK" is the answer.
    ensure!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("OK"),
        "callgrind_control {what} {pid} failed: {}",
        String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Gives `pid` its own vgdb pipes. Valgrind makes them (mode 0600) when the process starts or
/// forks, before nginx's workers drop to `nobody`; a worker could then not open them and
/// callgrind_control would wait forever.
fn hand_pipes_over(pid: u32, out: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(format!("/proc/{pid}"))?;
    let mine = format!("-{pid}-by-");
    for entry in std::fs::read_dir(out)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("vgdb") && name.contains(&mine) {
            std::os::unix::fs::chown(entry.path(), Some(owner.uid()), Some(owner.gid()))?;
        }
    }
    Ok(())
}

/// The newest dump of `pid`: callgrind numbers them `PEER.PID.1`, `.2`, ...
fn last_dump(out: &Path, peer: &str, pid: u32) -> Result<PathBuf> {
    let prefix = format!("{peer}.{pid}.");
    let newest = std::fs::read_dir(out)?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n: u64 = name.strip_prefix(&prefix)?.parse().ok()?;
            Some((n, e.path()))
        })
        .max_by_key(|(n, _)| *n);
    newest.map(|(_, p)| p).with_context(|| format!("no callgrind dump of {peer} (pid {pid}) in {}", out.display()))
}

/// The total of the first event (Ir, instructions) of a callgrind dump: its `summary:` line
/// (`totals:` in older files).
pub fn parse_callgrind_total(text: &str) -> Option<u64> {
    let line =
        text.lines().find(|l| l.starts_with("summary:")).or_else(|| text.lines().find(|l| l.starts_with("totals:")))?;
    line.split_once(':')?.1.split_whitespace().next()?.parse().ok()
}

fn print_count(c: &Count) {
    println!(
        "{:<10} {:<26} {:>6} requests ({} failed), {:>14} instructions in {} process(es): {:>9.0} per request",
        c.peer,
        c.test,
        c.requests,
        c.failed,
        c.instructions,
        c.processes,
        per_request(c)
    );
}

fn per_request(c: &Count) -> f64 {
    c.instructions as f64 / c.requests.max(1) as f64
}

fn print_summary(counts: &[Count]) {
    println!("\nuser-space instructions per request (callgrind Ir):");
    println!(
        "{:<26} {:>10} {:>10} {:>10} {:>14} {:>16}",
        "workload", "lb-proxy", "nginx", "haproxy", "lb-proxy/nginx", "lb-proxy/haproxy"
    );
    for test in TESTS.into_iter().filter(|t| t.load != Load::Bulk) {
        let of = |peer: &str| counts.iter().find(|c| c.peer == peer && c.test == test.name).map(per_request);
        let (lb, ng, ha) = (of("lb-proxy"), of("nginx"), of("haproxy"));
        if lb.is_none() && ng.is_none() && ha.is_none() {
            continue;
        }
        let cell = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        let ratio = |v: Option<f64>| match (lb, v) {
            (Some(lb), Some(v)) => format!("{:.2}x", lb / v.max(f64::MIN_POSITIVE)),
            _ => "-".to_string(),
        };
        println!(
            "{:<26} {:>10} {:>10} {:>10} {:>14} {:>16}",
            test.name,
            cell(lb),
            cell(ng),
            cell(ha),
            ratio(ng),
            ratio(ha)
        );
    }
    println!("targets (issue 31): <= 0.85x nginx's on HTTP 1 KiB, new conn and TCP mode; <= nginx's on the others");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_instruction_total_of_a_callgrind_dump() {
        let dump = "# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 4242
cmd:  nginx -c /tmp/x/nginx.conf
part: 2

desc: I1 cache: 
desc: Timerange: Basic block 123 - 456
desc: Trigger: Client Request: dump

positions: line
events: Ir
summary: 98765432

fl=(1) ???
fn=(1) 0x0000000000001000
0 5
totals: 98765432
";
        assert_eq!(parse_callgrind_total(dump), Some(98_765_432));
        assert_eq!(parse_callgrind_total("events: Ir Dr\ntotals: 7 3\n"), Some(7));
        assert_eq!(parse_callgrind_total("events: Ir\n"), None);
    }

    #[test]
    fn reads_h2load_request_counts() {
        let text = "finished in 1.00s, 2000.00 req/s, 2.20MB/s
requests: 2000 total, 2000 started, 2000 done, 1997 succeeded, 3 failed, 0 errored, 0 timeout
";
        assert_eq!(parse_h2load_requests(text), Some((1997, 3)));
    }
}
