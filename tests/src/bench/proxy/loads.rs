//! The load generators other than wrk: h2load (h2 multiplexed) and iperf3 (TCP bulk), run
//! against one port and read into the same [`Measured`] as wrk's runs.
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use super::wrk::{Measured, stdout_of};
use super::{DURATION_SECS, WORKERS};

/// h2 clients and streams per client: 10 × 10 requests in flight, as many as wrk's 50
/// connections give the HTTP/1 rows, doubled by multiplexing.
pub(super) const H2_CLIENTS: usize = 10;
pub(super) const H2_STREAMS: usize = 10;
/// Parallel iperf3 streams (one per worker).
const BULK_STREAMS: usize = WORKERS;

/// `h2load` over h2c (prior knowledge) against `port`; latency percentiles from its
/// per-request log written to `log`.
pub fn h2load(port: u16, path: &str, log: &Path) -> Result<Measured> {
    let mut cmd = Command::new("h2load");
    cmd.args([
        "-t".into(),
        WORKERS.to_string(),
        "-c".into(),
        H2_CLIENTS.to_string(),
        "-m".into(),
        H2_STREAMS.to_string(),
        "-D".into(),
        DURATION_SECS.to_string(),
    ])
    .arg(format!("--log-file={}", log.display()))
    .arg(format!("http://127.0.0.1:{port}{path}"));
    let text = stdout_of(cmd, "h2load")?;
    let log = std::fs::read_to_string(log).context("reading h2load's log")?;
    parse_h2load(&text, &log).with_context(|| format!("unexpected h2load output:\n{text}"))
}

/// The summary lines (`finished in 4.00s, 23456.50 req/s, ...`, `requests: N total, N
/// started, N done, N succeeded, N failed, N errored, N timeout`) and the per-request log
/// (`start µs \t status \t duration µs`).
pub fn parse_h2load(text: &str, log: &str) -> Option<Measured> {
    let rps = text.lines().find_map(|line| {
        let rest = line.strip_prefix("finished in ")?;
        rest.split(", ").nth(1).and_then(|r| r.strip_suffix(" req/s")).and_then(|r| r.parse().ok())
    });
    let (done, mut errors) = parse_h2load_requests(text)?;
    let mut micros: Vec<f64> = log
        .lines()
        .filter_map(|l| {
            let mut cols = l.split('\t');
            let status: u16 = cols.nth(1)?.trim().parse().ok()?;
            let took: f64 = cols.next()?.trim().parse().ok()?;
            errors += u64::from(!(200..400).contains(&status));
            Some(took)
        })
        .collect();
    micros.sort_by(f64::total_cmp);
    let at = |q: f64| micros.get(((micros.len() as f64 * q) as usize).min(micros.len().checked_sub(1)?)).copied();
    Some(Measured {
        rps: rps?,
        p50_ms: at(0.5)? / 1000.0,
        p99_ms: at(0.99)? / 1000.0,
        p999_ms: at(0.999).map(|us| us / 1000.0),
        errors,
        requests: done,
        cpu_us_per_request: None,
        unit: "req",
    })
}

/// h2load's `requests: N total, N started, N done, N succeeded, N failed, N errored, N
/// timeout` line: the requests that succeeded, and those that failed, errored or timed out.
pub fn parse_h2load_requests(text: &str) -> Option<(u64, u64)> {
    let rest = text.lines().find_map(|line| line.strip_prefix("requests: "))?;
    let (mut done, mut errors) = (None, 0u64);
    for part in rest.split(", ") {
        let (n, what) = part.split_once(' ')?;
        let n: u64 = n.parse().ok()?;
        match what {
            "succeeded" => done = Some(n),
            "failed" | "errored" | "timeout" => errors += n,
            _ => {}
        }
    }
    Some((done?, errors))
}

/// `iperf3` (TCP, `BULK_STREAMS` streams, receiver's figures) against `port`, which leads to
/// the bulk server. Rate and "requests" are in MiB: the CPU column becomes µs per MiB.
pub fn iperf3(port: u16) -> Result<Measured> {
    let run = || {
        let mut cmd = Command::new("iperf3");
        cmd.args(["-c", "127.0.0.1", "-p", &port.to_string(), "-J", "-t", &DURATION_SECS.to_string()])
            .args(["-P", &BULK_STREAMS.to_string()]);
        stdout_of(cmd, "iperf3")
    };
    let text = run()?;
    if let Some(m) = parse_iperf3(&text) {
        return Ok(m);
    }
    // The iperf3 server takes one test at a time, and the previous peer's may still be
    // closing: a run whose control connection closed before any interval is tried once more.
    if text.contains("control socket has closed unexpectedly") {
        eprintln!("iperf3 through port {port}: the control connection closed at the start; once more");
        std::thread::sleep(std::time::Duration::from_secs(2));
        let text = run()?;
        return parse_iperf3(&text).with_context(|| format!("unexpected iperf3 output:\n{text}"));
    }
    Err(anyhow::anyhow!("unexpected iperf3 output:\n{text}"))
}

pub fn parse_iperf3(json: &str) -> Option<Measured> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let received = &v["end"]["sum_received"];
    let bytes = received["bytes"].as_f64()?;
    let seconds = received["seconds"].as_f64()?;
    let mib = bytes / (1024.0 * 1024.0);
    Some(Measured {
        rps: mib / seconds.max(f64::MIN_POSITIVE),
        p50_ms: 0.0,
        p99_ms: 0.0,
        p999_ms: None,
        // iperf3 fails the run (an error, not a figure) when a stream breaks.
        errors: 0,
        requests: mib as u64,
        cpu_us_per_request: None,
        unit: "MiB",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_h2load_summary_and_log() {
        let text = "finished in 4.00s, 25000.00 req/s, 27.10MB/s
requests: 100000 total, 100010 started, 100000 done, 99998 succeeded, 2 failed, 0 errored, 0 timeout
status codes: 99998 2xx, 0 3xx, 0 4xx, 2 5xx
";
        let log: String = (1..=1000).map(|i| format!("1700000000000000\t200\t{}\n", i * 10)).collect();
        let r = parse_h2load(text, &log).unwrap();
        assert_eq!((r.rps, r.requests, r.errors), (25000.0, 99998, 2));
        assert_eq!((r.p50_ms, r.p99_ms, r.p999_ms), (5.01, 9.91, Some(10.0)));
    }

    #[test]
    fn parses_iperf3_json() {
        let json =
            r#"{"end": {"sum_sent": {"retransmits": 3}, "sum_received": {"bytes": 4294967296, "seconds": 4.0}}}"#;
        let r = parse_iperf3(json).unwrap();
        assert_eq!((r.rps, r.requests, r.errors, r.unit), (1024.0, 4096, 0, "MiB"));
    }
}
