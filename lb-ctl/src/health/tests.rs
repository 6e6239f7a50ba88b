use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::*;

fn ok() -> Outcome {
    Outcome::Success
}
fn fail() -> Outcome {
    Outcome::Failure("timed out".into())
}
fn refused() -> Outcome {
    Outcome::Refused("connection refused".into())
}

/// Runs outcomes through a machine; returns the health after each (and whether it changed).
fn run(start: Health, rise: u32, fall: u32, outcomes: &[Outcome]) -> Vec<(Health, bool)> {
    let mut m = Machine::new(start, rise, fall);
    outcomes
        .iter()
        .map(|o| {
            let t = m.observe(o);
            (m.health, t.is_some())
        })
        .collect()
}

#[test]
fn rise_successes_in_a_row_bring_a_backend_up() {
    use Health::*;
    assert_eq!(run(Pending, 2, 3, &[ok(), ok(), ok()]), vec![(Pending, false), (Up, true), (Up, false)]);
    // A failure in between restarts the count.
    assert_eq!(
        run(Pending, 2, 3, &[ok(), fail(), ok(), ok()]),
        vec![(Pending, false), (Pending, false), (Pending, false), (Up, true)]
    );
    assert_eq!(run(Down, 1, 3, &[ok()]), vec![(Up, true)]);
}

#[test]
fn fall_failures_in_a_row_take_a_backend_down() {
    use Health::*;
    assert_eq!(
        run(Up, 2, 3, &[fail(), fail(), ok(), fail(), fail(), fail(), fail()]),
        vec![(Up, false), (Up, false), (Up, false), (Up, false), (Up, false), (Down, true), (Down, false)]
    );
    // A pending backend that keeps failing is reported down too.
    assert_eq!(run(Pending, 2, 2, &[fail(), fail()]), vec![(Pending, false), (Down, true)]);
}

#[test]
fn a_refused_connection_takes_a_backend_down_at_once() {
    use Health::*;
    assert_eq!(run(Up, 2, 3, &[refused(), refused()]), vec![(Down, true), (Down, false)]);
    // And it still needs `rise` successes to come back.
    assert_eq!(run(Up, 2, 3, &[refused(), ok(), ok()]), vec![(Down, true), (Down, false), (Up, true)]);
}

/// A tiny HTTP server on 127.0.0.1 port 0: answers `status` to every request, or never
/// answers when `status` is 0. Returns its address.
async fn http_server(status: u16) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else { return };
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                if status == 0 {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    return;
                }
                let reply = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                let _ = s.write_all(reply.as_bytes()).await;
            });
        }
    });
    addr
}

/// An address where nothing listens (bound, then closed): connections are refused.
async fn closed_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

fn spec(check: CheckKind, ms: u64, rise: u32, fall: u32) -> HealthSpec {
    HealthSpec {
        check,
        address: None,
        interval: Duration::from_millis(ms),
        timeout: Duration::from_millis(ms),
        rise,
        fall,
    }
}

fn http(path: &str) -> CheckKind {
    CheckKind::Http { path: path.into(), status: 200 }
}

#[tokio::test]
async fn tcp_check_against_real_sockets() {
    let up = http_server(200).await;
    assert_eq!(tcp::check(up, Duration::from_secs(1)).await, Outcome::Success);
    let down = closed_port().await;
    assert!(matches!(tcp::check(down, Duration::from_secs(1)).await, Outcome::Refused(_)));
}

#[tokio::test]
async fn http_check_wants_the_expected_status_in_time() {
    let t = Duration::from_millis(300);
    assert_eq!(http::check(http_server(200).await, "/health", 200, t).await, Outcome::Success);
    assert_eq!(
        http::check(http_server(503).await, "/health", 200, t).await,
        Outcome::Failure("GET /health: status 503, expected 200".into())
    );
    assert_eq!(
        http::check(http_server(0).await, "/health", 200, t).await,
        Outcome::Failure("GET /health: no answer within 300ms".into())
    );
    assert!(matches!(http::check(closed_port().await, "/", 200, t).await, Outcome::Refused(_)));
}

fn channel_sink() -> (Sink, mpsc::UnboundedReceiver<Event>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (
        Arc::new(move |e| {
            let _ = tx.send(e);
        }),
        rx,
    )
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.expect("no health event within 5s").unwrap()
}

#[tokio::test]
async fn checker_reports_transitions_only() {
    let (sink, mut rx) = channel_sink();
    let addr = http_server(200).await;
    let target = Target {
        backend_id: 7,
        address: addr,
        vip: "web".into(),
        spec: spec(http("/"), 20, 2, 2),
        latency: super::latency_histogram(),
    };
    let task = tokio::spawn(run_checker(target, 42, Health::Pending, sink));
    let e = next(&mut rx).await;
    assert_eq!((e.backend_id, e.token, e.health), (7, 42, Health::Up));
    assert_eq!(e.reason, "2 successful checks in a row");
    // Healthy checks go on, but no more events.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(rx.try_recv().is_err());
    task.abort();
}

#[tokio::test]
async fn checker_counts_failures_then_goes_down() {
    let (sink, mut rx) = channel_sink();
    let addr = http_server(500).await;
    let target = Target {
        backend_id: 1,
        address: addr,
        vip: "web".into(),
        spec: spec(http("/"), 20, 2, 3),
        latency: super::latency_histogram(),
    };
    let started = tokio::time::Instant::now();
    let task = tokio::spawn(run_checker(target, 1, Health::Up, sink));
    let e = next(&mut rx).await;
    assert_eq!(e.health, Health::Down);
    assert_eq!(e.reason, "3 failed checks in a row, last: GET /: status 500, expected 200");
    // Three checks, 20 ms apart: at least two intervals.
    assert!(started.elapsed() >= Duration::from_millis(40));
    task.abort();
}

#[tokio::test]
async fn checkers_follow_the_state_and_drop_stale_events() {
    use crate::config::Config;
    let up = http_server(200).await;
    let text = format!(
        "[[vip]]\nname = \"web\"\naddress = \"203.0.113.10\"\nport = 80\nhealth = {{ kind = \"tcp\", interval = \"20ms\", rise = 1 }}\n\
         backends = [ {{ address = \"198.51.100.1\", health = {{ address = \"{up}\" }} }}, {{ address = \"198.51.100.2\", health = {{ kind = \"none\" }} }} ]\n"
    );
    let config = Config::parse(&text, std::path::Path::new("lb.toml")).unwrap();
    let mut state = State::from_config(&config, &State::default()).unwrap();
    let (sink, mut rx) = channel_sink();
    let mut checkers = Checkers::new(tokio::runtime::Handle::current(), sink);
    checkers.sync(&state);
    assert_eq!(checkers.len(), 1, "the unchecked backend gets no checker");
    let e = next(&mut rx).await;
    assert_eq!(e.health, Health::Up);
    assert!(checkers.is_current(&e));
    let series = vec![("vip", "web".to_string()), ("backend", "198.51.100.1:80".to_string())];
    let observed = checkers_series_count(&checkers, &series);
    assert!(observed.is_some_and(|n| n >= 1), "the check's duration is recorded: {observed:?}");
    // A changed check restarts the checker: the old one's events are now stale.
    state.vips[0].backends[0].check.as_mut().unwrap().rise = 2;
    checkers.sync(&state);
    assert!(!checkers.is_current(&e));
    assert_eq!(checkers.len(), 1);
    assert!(checkers_series_count(&checkers, &series).is_some(), "a restarted check keeps its series");
    // Removing the backend stops its checker and drops its series.
    state.remove_backend("web", "198.51.100.1:80").unwrap();
    checkers.sync(&state);
    assert!(checkers.is_empty());
    assert_eq!(checkers_series_count(&checkers, &series), None, "no stale series");
}

/// How many durations the check-duration series `labels` holds, if it exists.
fn checkers_series_count(checkers: &Checkers, labels: &Vec<(&'static str, String)>) -> Option<u64> {
    let h = checkers.latency.get(labels)?;
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register("h", "h", h.clone());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text.lines().find_map(|l| l.strip_prefix("h_count ")).and_then(|n| n.parse().ok())
}
