//! Traffic through the VIP while the fleet goes through a step: long-lived connections
//! ([`Hold`], one byte a second) and a churn of new ones, counted as broken connections and
//! body bytes lost.
use std::net::SocketAddrV4;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::cluster::client_addr;
use crate::lab::{Hold, http_get_from};
use crate::netns::enter_named;

/// The churn's bound: it stops by itself after this long.
const CHURN_LIMIT: Duration = Duration::from_secs(120);

/// New connections (`Connection: close`), one after another from the client addresses
/// `first..first + count`, until stopped.
pub struct Churn {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(usize, Vec<String>)>,
}

impl Churn {
    /// From the client addresses `first..first + count`, any source port.
    pub fn start(client_ns: &str, vip: SocketAddrV4, first: usize, count: usize) -> Churn {
        Churn::with_sources(client_ns, vip, move |done| Some(SocketAddrV4::new(client_addr(first + done % count), 0)))
    }

    /// From each of `flows` (source address and port) once, in order; then it waits to be
    /// stopped. For a step whose new connections must avoid a backend (a 5-tuple-hashed VIP).
    pub fn over(client_ns: &str, vip: SocketAddrV4, flows: Vec<SocketAddrV4>) -> Churn {
        Churn::with_sources(client_ns, vip, move |done| flows.get(done).copied())
    }

    /// Connection `done` from `source(done)`, until it gives none or the churn is stopped.
    fn with_sources(
        client_ns: &str,
        vip: SocketAddrV4,
        source: impl Fn(usize) -> Option<SocketAddrV4> + Send + 'static,
    ) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, ns) = (stop.clone(), client_ns.to_string());
        let thread = std::thread::spawn(move || {
            let _in = enter_named(&ns);
            let started = Instant::now();
            let (mut done, mut failed) = (0usize, Vec::new());
            while !flag.load(Relaxed) && started.elapsed() < CHURN_LIMIT {
                let Some(src) = source(done) else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                match http_get_from(src.into(), vip.into(), "/") {
                    Ok((200, _)) => {}
                    outcome => failed.push(format!("new connection {src} -> {vip}: {outcome:?}")),
                }
                done += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            (done, failed)
        });
        Churn { stop, thread }
    }

    /// Stops it; the connections it made and those that failed.
    pub fn stop(self) -> (usize, Vec<String>) {
        self.stop.store(true, Relaxed);
        self.thread.join().expect("churn thread")
    }
}

/// How a step's traffic ended.
#[derive(Debug, Default)]
pub struct Tally {
    /// Long-lived and new connections made, and those that broke.
    pub connections: usize,
    pub broken: Vec<String>,
    /// Body bytes the long-lived connections were sent, and those that did not arrive.
    pub bytes: usize,
    pub bytes_lost: usize,
}

impl Tally {
    /// Reads the long-lived connections to their end and stops the churn.
    pub fn of(holds: Vec<Hold>, churn: Churn) -> Tally {
        let mut tally = Tally::default();
        for hold in holds {
            let ending = hold.ending();
            tally.connections += 1;
            tally.bytes += ending.expected;
            tally.bytes_lost += ending.lost();
            if let Err(e) = ending.result {
                tally.broken.push(format!("long-lived: {e}"));
            }
        }
        let (made, failed) = churn.stop();
        tally.connections += made;
        tally.broken.extend(failed);
        tally
    }

    /// "N connections, B broken, L of T bytes lost".
    pub fn line(&self) -> String {
        format!(
            "{} connections, {} broken, {} of {} bytes lost",
            self.connections,
            self.broken.len(),
            self.bytes_lost,
            self.bytes
        )
    }
}
