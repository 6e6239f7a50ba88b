//! wrk runs against one port, and what they print; [`Measured`] is every generator's result.
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::{CONNECTIONS, DURATION_SECS, WORKERS};
use crate::bench::cpu::CpuTime;

pub struct Measured {
    /// Requests a second, or MiB a second for a bulk transfer (`unit`).
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// From wrk's Lua hook (`--latency` stops at the 99th percentile).
    pub p999_ms: Option<f64>,
    pub errors: u64,
    /// Requests wrk completed in the run.
    pub requests: u64,
    /// CPU time (user and system) of the proxy's processes per request, in microseconds.
    pub cpu_us_per_request: Option<CpuTime>,
    /// What `rps`, `requests` and the CPU figure count: "req", or "MiB" for a bulk transfer.
    pub unit: &'static str,
}

pub fn print_row(peer: &str, test: &str, r: &Measured) {
    let per = if r.unit == "req" { String::new() } else { format!("/{}", r.unit) };
    let cpu = r.cpu_us_per_request.map_or("-".to_string(), |t| format!("{:.1}us{per} ({:.1})", t.total(), t.user));
    let p999 = r.p999_ms.map_or("-".to_string(), fmt_ms);
    let (p50, p99) = if r.unit == "req" { (fmt_ms(r.p50_ms), fmt_ms(r.p99_ms)) } else { ("-".into(), "-".into()) };
    let rate = if r.unit == "req" { format!("{:.0}", r.rps) } else { format!("{:.0} {}/s", r.rps, r.unit) };
    println!("{peer:<10} {test:<36} {rate:>12} {p50:>10} {p99:>10} {p999:>10} {:>8} {cpu:>20}", r.errors);
}

pub fn fmt_ms(ms: f64) -> String {
    if ms < 1.0 { format!("{:.0}us", ms * 1000.0) } else { format!("{ms:.2}ms") }
}

/// wrk's Lua hook that prints the 99.9th latency percentile in `--latency`'s format.
pub const P999_SCRIPT: &str = "done = function(summary, latency, requests)\n  io.write(string.format(\"99.9%% %.2fus\\n\", latency:percentile(99.9)))\nend\n";

/// Runs wrk against `port` (over TLS with `tls`); `script` is [`P999_SCRIPT`] written to a
/// file; `close`: a new connection for every request.
pub fn wrk(port: u16, path: &str, script: &std::path::Path, close: bool, tls: bool) -> Result<Measured> {
    let scheme = if tls { "https" } else { "http" };
    let close_header: &[&str] = if close { &["-H", "Connection: close"] } else { &[] };
    let mut cmd = Command::new("wrk");
    cmd.arg("-s").arg(script).args(close_header).args([
        format!("-t{WORKERS}"),
        format!("-c{CONNECTIONS}"),
        format!("-d{DURATION_SECS}s"),
        "--timeout".into(),
        "5s".into(),
        "--latency".into(),
        format!("{scheme}://127.0.0.1:{port}{path}"),
    ]);
    let text = stdout_of(cmd, "wrk")?;
    parse_wrk(&text).with_context(|| format!("unexpected wrk output:\n{text}"))
}

/// Runs a load generator to its end; its standard output, or an error with all it printed.
pub fn stdout_of(mut cmd: Command, what: &str) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("{what} failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(text)
}

pub fn parse_wrk(text: &str) -> Option<Measured> {
    let mut rps = None;
    let (mut p50, mut p99, mut p999) = (None, None, None);
    let mut errors = 0u64;
    let mut requests = 0u64;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", v] => rps = v.parse().ok(),
            [n, "requests", "in", ..] => requests = n.parse().unwrap_or(0),
            ["50%", v] => p50 = parse_duration_ms(v),
            ["99%", v] => p99 = parse_duration_ms(v),
            ["99.9%", v] => p999 = parse_duration_ms(v),
            // "Non-2xx or 3xx responses: N" and "Socket errors: connect A, read B, write C, timeout D"
            ["Non-2xx", "or", "3xx", "responses:", n] => errors += n.parse::<u64>().unwrap_or(0),
            ["Socket", "errors:", rest @ ..] => {
                errors += rest.iter().filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok()).sum::<u64>()
            }
            _ => {}
        }
    }
    Some(Measured {
        rps: rps?,
        p50_ms: p50?,
        p99_ms: p99?,
        p999_ms: p999,
        errors,
        requests,
        cpu_us_per_request: None,
        unit: "req",
    })
}

/// wrk prints latencies like `812.00us`, `1.23ms`, `2.01s`.
fn parse_duration_ms(v: &str) -> Option<f64> {
    let split = v.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = v.split_at(split);
    let n: f64 = num.parse().ok()?;
    Some(match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_wrk_output() {
        let text = "Running 4s test @ http://127.0.0.1:1/1k
  2 threads and 50 connections
  Latency Distribution
     50%  812.00us
     75%    1.10ms
     90%    1.50ms
     99%    3.20ms
99.9% 5120.00us
  80000 requests in 4.00s, 90.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 5
Requests/sec:  20000.50
Transfer/sec:     22.50MB
";
        let r = parse_wrk(text).unwrap();
        assert_eq!(r.rps, 20000.5);
        assert!((r.p50_ms - 0.812).abs() < 1e-9);
        assert_eq!(r.p99_ms, 3.2);
        assert_eq!(r.p999_ms, Some(5.12));
        assert_eq!(r.errors, 8);
    }
}
