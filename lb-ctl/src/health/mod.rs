//! Health checks: one tokio task per checked backend runs its check every `interval` and
//! feeds the outcome to a [`Machine`], which decides up and down with the `rise`/`fall`
//! thresholds. Only transitions leave the task: they are logged and sent to the daemon's
//! writer as [`Event`]s, which puts the backend in or out of its VIP's ring.
//!
//! Passive signal: a refused connection (the backend host answered with a reset: nothing
//! listens on the port) takes a backend down at once, without waiting for `fall` failures in
//! a row. Timeouts and other errors count as ordinary failures.
pub mod http;
pub mod tcp;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use tokio::task::AbortHandle;

use crate::config::words::counted;
use crate::config::{CheckKind, HealthSpec};
use crate::state::{Health, State};

/// The result of one check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// Failed: timeout, error, wrong status.
    Failure(String),
    /// The connection was refused: down at once.
    Refused(String),
}

/// The rise/fall state machine of one backend. Pure: no I/O, no clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    pub health: Health,
    successes: u32,
    failures: u32,
    rise: u32,
    fall: u32,
}

impl Machine {
    /// A machine starting in `health` (`Pending` for a new backend, or the state a backend
    /// had when its check was restarted).
    pub fn new(health: Health, rise: u32, fall: u32) -> Machine {
        Machine { health, successes: 0, failures: 0, rise: rise.max(1), fall: fall.max(1) }
    }

    /// Counts one outcome; returns the new health if it changed.
    pub fn observe(&mut self, outcome: &Outcome) -> Option<Health> {
        let next = match outcome {
            Outcome::Success => {
                self.failures = 0;
                self.successes = self.successes.saturating_add(1);
                (self.successes >= self.rise).then_some(Health::Up)
            }
            Outcome::Failure(_) => {
                self.successes = 0;
                self.failures = self.failures.saturating_add(1);
                (self.failures >= self.fall).then_some(Health::Down)
            }
            Outcome::Refused(_) => {
                self.successes = 0;
                self.failures = self.fall;
                Some(Health::Down)
            }
        };
        match next {
            Some(h) if h != self.health => {
                self.health = h;
                Some(h)
            }
            _ => None,
        }
    }
}

/// A health transition, for the writer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub backend_id: u32,
    /// Which checker sent it: events of a checker that has since been replaced are ignored.
    pub token: u64,
    pub health: Health,
    /// The outcome that caused it.
    pub reason: String,
}

/// Where checkers send their transitions.
/// A backend's last health transition, as the daemon applied it (for `backends list` and
/// metrics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// When it happened, in seconds since the Unix epoch.
    pub at_unix: u64,
    pub reason: String,
    /// Transitions of this backend since the daemon started.
    pub count: u64,
}

pub type Sink = Arc<dyn Fn(Event) + Send + Sync>;

/// Runs one check.
pub async fn check_once(addr: SocketAddr, spec: &HealthSpec) -> Outcome {
    match &spec.check {
        CheckKind::Tcp => tcp::check(addr, spec.timeout).await,
        CheckKind::Http { path, status } => http::check(addr, path, *status, spec.timeout).await,
    }
}

/// What a checker needs to know.
#[derive(Clone, Debug)]
pub struct Target {
    pub backend_id: u32,
    pub address: SocketAddr,
    /// The VIP's label, for logs.
    pub vip: String,
    pub spec: HealthSpec,
    /// Where each check's duration is recorded.
    pub latency: Histogram,
}

/// Check durations by `vip` and `backend` label.
pub type LatencyFamily = Family<Vec<(&'static str, String)>, Histogram, fn() -> Histogram>;

/// Buckets from 0.5 ms to 8 s (checks time out at their `timeout`).
pub(crate) fn latency_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.0005, 2.0, 15))
}

/// The checker loop of one backend: checks at once, then every interval, until aborted.
pub async fn run_checker(target: Target, token: u64, initial: Health, sink: Sink) {
    let spec = &target.spec;
    let mut machine = Machine::new(initial, spec.rise, spec.fall);
    let mut ticks = tokio::time::interval(spec.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let began = std::time::Instant::now();
        let outcome = check_once(spec.address.unwrap_or(target.address), spec).await;
        target.latency.observe(began.elapsed().as_secs_f64());
        let before = machine.health;
        if let Some(health) = machine.observe(&outcome) {
            let reason = match &outcome {
                Outcome::Success => format!("{} in a row", counted(spec.rise, "successful check", "successful checks")),
                Outcome::Failure(e) => {
                    format!("{} in a row, last: {e}", counted(spec.fall, "failed check", "failed checks"))
                }
                // Already says what refused it ("connect: Connection refused ..."): not twice.
                Outcome::Refused(e) => e.clone(),
            };
            match health {
                Health::Up => tracing::info!(
                    vip = %target.vip, backend = %target.address, from = before.as_str(), to = "up", %reason,
                    "backend is up"
                ),
                _ => tracing::warn!(
                    vip = %target.vip, backend = %target.address, from = before.as_str(), to = health.as_str(), %reason,
                    "backend is down"
                ),
            }
            sink(Event { backend_id: target.backend_id, token, health, reason });
        } else if let Outcome::Failure(e) | Outcome::Refused(e) = &outcome {
            tracing::debug!(vip = %target.vip, backend = %target.address, error = %e, "health check failed");
        }
    }
}

struct Running {
    token: u64,
    /// The VIP's label (the series' `vip`).
    vip: String,
    address: SocketAddr,
    spec: HealthSpec,
    task: AbortHandle,
}

/// The `vip` and `backend` labels of a backend's check-duration series.
fn latency_labels(vip: &str, address: SocketAddr) -> Vec<(&'static str, String)> {
    vec![("vip", vip.to_string()), ("backend", address.to_string())]
}

/// The running checkers, one per checked backend, kept in line with the state.
pub struct Checkers {
    /// How long each check took, per VIP and backend (seconds), for metrics.
    pub latency: LatencyFamily,
    runtime: tokio::runtime::Handle,
    sink: Sink,
    running: HashMap<u32, Running>,
    next_token: u64,
}

impl Checkers {
    /// Checkers that run on `runtime` and send their transitions to `sink`.
    pub fn new(runtime: tokio::runtime::Handle, sink: Sink) -> Checkers {
        let latency = LatencyFamily::new_with_constructor(latency_histogram);
        Checkers { latency, runtime, sink, running: HashMap::new(), next_token: 1 }
    }

    /// Starts checkers for newly checked backends, restarts those whose check changed, stops
    /// those of backends that are gone or no longer checked.
    pub fn sync(&mut self, state: &State) {
        let mut wanted = HashMap::new();
        for v in &state.vips {
            for b in &v.backends {
                if let Some(spec) = &b.check {
                    wanted.insert(b.id, (v.label(), b.address, spec.clone(), b.health));
                }
            }
        }
        let latency = &self.latency;
        self.running.retain(|id, r| {
            let keep = wanted.get(id).is_some_and(|(_, addr, spec, _)| *addr == r.address && *spec == r.spec);
            if !keep {
                r.task.abort();
                // A backend no longer checked leaves no stale series behind (one whose check
                // only changed keeps its history: the restarted checker takes it over).
                if !wanted.values().any(|(vip, addr, _, _)| *vip == r.vip && *addr == r.address) {
                    latency.remove(&latency_labels(&r.vip, r.address));
                }
            }
            keep
        });
        for (id, (vip, address, spec, health)) in wanted {
            if self.running.contains_key(&id) {
                continue;
            }
            let token = self.next_token;
            self.next_token += 1;
            let latency = self.latency.get_or_create(&latency_labels(&vip, address)).clone();
            let target = Target { backend_id: id, address, vip: vip.clone(), spec: spec.clone(), latency };
            let task = self.runtime.spawn(run_checker(target, token, health, self.sink.clone())).abort_handle();
            self.running.insert(id, Running { token, vip, address, spec, task });
        }
    }

    /// Whether `event` comes from the current checker of its backend.
    pub fn is_current(&self, event: &Event) -> bool {
        self.running.get(&event.backend_id).is_some_and(|r| r.token == event.token)
    }

    /// Number of running checkers.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Stops every checker.
    pub fn stop(&mut self) {
        self.running.drain().for_each(|(_, r)| r.task.abort());
    }
}

impl Drop for Checkers {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests;
