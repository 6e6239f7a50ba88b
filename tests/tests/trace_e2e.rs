//! `lb-ctl trace` end to end: the real daemon attached in a namespace lab, the real
//! `lb-ctl trace` process, real HTTP from the client namespace. The lines must show what the
//! golden cases expect of the same packets (a SYN placed on the ring and recorded, the rest of
//! the connection found in the table, the backend's replies rewritten back to the VIP), only
//! for the client asked for; and the daemon must remove the filter when the command ends, by
//! Ctrl-C, by `--count`, and by kill -9. Needs root.
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lb_ctl::api::trace::{TraceEvent, TracedPacket};
use lb_tests::lab::{Daemon, LB_PORT, Lab, backend_addr, client_addr, http_get, wait_for_listener};
use lb_tests::netns::enter_named;
use lb_tests::privileges::require_root;

const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);

fn config(socket: &std::path::Path) -> String {
    format!(
        "[daemon]\napi_socket = \"{}\"\n\n[[vip]]\nname = \"web\"\naddress = \"{VIP}\"\nport = 80\n\
         health = {{ kind = \"tcp\", interval = \"200ms\", timeout = \"100ms\", rise = 1, fall = 3 }}\n\
         backends = [ {{ address = \"{}\", port = 8080 }} ]\n",
        socket.display(),
        backend_addr(0)
    )
}

/// A running `lb-ctl trace`, its output lines arriving on a channel.
struct Trace {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Trace {
    fn start(d: &Daemon, args: &[&str]) -> Trace {
        let mut child = Command::new(lb_tests::lb_ctl_bin())
            .arg("--socket")
            .arg(d.socket())
            .arg("trace")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting lb-ctl trace");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Trace { child, lines }
    }

    /// The next line, within `within`.
    fn line(&self, within: Duration) -> Option<String> {
        self.lines.recv_timeout(within).ok()
    }

    /// Packets (JSON lines) until `enough` says so, within 20 s.
    fn packets_until(&self, enough: impl Fn(&[TracedPacket]) -> bool) -> Vec<TracedPacket> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut got = Vec::new();
        while !enough(&got) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(line) = self.line(left) else { panic!("trace lines so far: {got:#?}") };
            if let TraceEvent::Packet(p) = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}")) {
                got.push(*p);
            }
        }
        got
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until the daemon's log has said `what` `n` times.
fn wait_log(d: &Daemon, what: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while d.log_text().matches(what).count() < n {
        assert!(Instant::now() < deadline, "the daemon did not log {what:?} {n} times:\n{}", d.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn get(lab: &Lab, client: usize) {
    let _in = enter_named(&lab.client.name);
    let (status, _) = http_get(client_addr(client), SocketAddr::from((VIP, 80)), "/").unwrap();
    assert_eq!(status, 200);
}

#[test]
fn trace_shows_the_decisions_and_its_filter_goes_with_it() {
    if !require_root("trace_shows_the_decisions_and_its_filter_goes_with_it") {
        return;
    }
    let mut lab = Lab::new("tr", 1, 2);
    let ns = lab.backends[0].name.clone();
    lab.spawn(&ns, &[env!("CARGO_BIN_EXE_lb-test-backend"), "0.0.0.0:8080", "backend-0"]);
    {
        let _in = lab.backends[0].enter();
        wait_for_listener(SocketAddr::from((backend_addr(0), 8080)), Duration::from_secs(10));
    }
    lab.pass_on_switch_port(LB_PORT);
    lab.resolve_backends();
    let mut d = Daemon::new(&lab.lb, "eth0", "tr", &["--xdp-mode", "native"]);
    d.write_config_text(&config(&d.socket()));
    d.start();
    d.wait_for_backend(format!("{}:8080", backend_addr(0)).parse().unwrap(), Duration::from_secs(10), "up", |b| {
        b.in_ring
    });
    let backend = format!("{}:8080", backend_addr(0));

    // Mistakes are refused, and start no trace.
    for (args, says) in [
        (&["--vip", "nosuch"][..], "nosuch"),
        (&["--client", "192.0.2.300"][..], "malformed client"),
        (&["--backend", "198.51.100.250:1"][..], "no backend"),
        (&["--budget", "0"][..], "budget 0"),
    ] {
        let out = d.ctl(&[&["trace"][..], args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
    }
    assert!(!d.log_text().contains("trace started"), "a refused trace started nothing");

    // One client's connection, as JSON lines; another client's is not shown.
    let trace = Trace::start(&d, &["--vip", "web", "--client", &client_addr(0).to_string(), "--json"]);
    wait_log(&d, "trace started", 1);
    get(&lab, 1);
    get(&lab, 0);
    // The client's FIN ends its side: by then SYN, ACK, request and FIN have gone through.
    let got = trace.packets_until(|p| p.iter().any(|p| p.kind == "vip" && p.tcp_flags.contains('F')));
    let client = client_addr(0).to_string();
    for p in &got {
        let (from, to) = if p.kind == "vip" { (&p.src, &p.dst) } else { (&p.dst, &p.src) };
        assert!(from.starts_with(&format!("{client}:")), "only the client asked for: {p:#?}");
        if p.kind == "vip" {
            assert_eq!(to, "203.0.113.10:80");
        }
        assert_eq!(p.vip.as_deref(), Some("web"), "{p:#?}");
        // Sent on; or, the neighbour not resolved yet, rewritten and handed to the stack.
        let sent = ["tx", "redirect"].contains(&p.verdict.as_str()) || p.reason == "pass_no_neighbour";
        assert!(sent && p.rewrite.is_some(), "forwarded: {p:#?}");
    }
    let syn = &got[0];
    assert_eq!((syn.kind.as_str(), syn.tcp_flags.as_str()), ("vip", "S"), "{got:#?}");
    assert!(syn.decision.contains(&"flow_new".to_string()), "a SYN is placed and recorded: {syn:#?}");
    assert_eq!(syn.backend.as_deref(), Some(backend.as_str()));
    assert!(syn.ring_slot.is_some());
    assert_eq!(syn.rewrite.as_deref(), Some(format!("nat to {backend}").as_str()), "{syn:#?}");
    assert!(syn.next_hop.is_some());
    let rest: Vec<&TracedPacket> = got.iter().skip(1).filter(|p| p.kind == "vip").collect();
    assert!(!rest.is_empty() && rest.iter().all(|p| p.decision.contains(&"flow_hit".to_string())), "{got:#?}");
    let replies: Vec<&TracedPacket> = got.iter().filter(|p| p.kind == "reply").collect();
    assert!(!replies.is_empty(), "the backend's answers: {got:#?}");
    for r in replies {
        assert_eq!(r.src, backend);
        assert!(r.decision.contains(&"nat_reply".to_string()), "{r:#?}");
        assert_eq!(r.rewrite.as_deref(), Some("nat from 203.0.113.10:80"), "{r:#?}");
    }

    // Ctrl-C ends it, and the daemon removes the filter.
    let mut trace = trace;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(trace.child.id() as i32, libc::SIGINT) };
    assert!(trace.child.wait().unwrap().success(), "Ctrl-C ends the trace cleanly");
    wait_log(&d, "trace ended; its filter is removed", 1);

    // --count: the command ends by itself; text lines.
    let counted = Trace::start(&d, &["--client", &client_addr(0).to_string(), "--count", "2"]);
    wait_log(&d, "trace started", 2);
    get(&lab, 0);
    let first = counted.line(Duration::from_secs(20)).expect("a line");
    assert!(
        first.contains(&format!("{client}:")) && first.contains("vip web") && first.contains("flow_new"),
        "{first}"
    );
    assert!(first.contains(&format!("-> {backend}")) && first.contains(&format!("nat to {backend}")), "{first}");
    assert!(counted.line(Duration::from_secs(20)).is_some());
    let mut counted = counted;
    assert!(counted.child.wait().unwrap().success());
    wait_log(&d, "trace ended; its filter is removed", 2);

    // kill -9: nothing of the command runs any more; the daemon notices the closed connection.
    let mut killed = Trace::start(&d, &["--vip", "web"]);
    wait_log(&d, "trace started", 3);
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    wait_log(&d, "trace ended; its filter is removed", 3);
    d.stop();
}
