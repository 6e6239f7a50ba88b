//! Resolves the configuration's backend host names again every `daemon.resolve_interval`, off
//! the writer (a lookup may take seconds), and hands each answer to the writer, which applies
//! it (`State::resolved`).
use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::Command;
use crate::config::Config;
use crate::config::hosts::Resolver;
use crate::state::VipIdentity;

/// Longest a lookup may take; a slower one counts as failed (and changes nothing).
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// A name to resolve for a VIP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Target {
    pub vip: VipIdentity,
    pub host: String,
    pub port: u16,
}

/// A lookup's answer, for the writer.
#[derive(Debug)]
pub(super) struct Answer {
    pub target: Target,
    pub result: Result<Vec<SocketAddr>, String>,
}

/// What to resolve and how often: the configuration in force's, followed across reloads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Plan {
    /// Zero: names are resolved only when the file is loaded.
    pub interval: Duration,
    pub targets: Vec<Target>,
}

impl Plan {
    pub fn of(config: &Config) -> Plan {
        let targets = config
            .vips
            .iter()
            .flat_map(|v| v.hosts.iter().map(|h| Target { vip: v.identity(), host: h.host.clone(), port: h.port }))
            .collect();
        Plan { interval: config.daemon.resolve_interval, targets }
    }
}

/// Starts the resolving task. It follows the plan in force through `plan`, and stops when
/// the writer has stopped.
pub(super) fn spawn(mut plan: watch::Receiver<Plan>, resolve: Resolver, tx: mpsc::UnboundedSender<Command>) {
    tokio::spawn(async move {
        loop {
            let current = plan.borrow_and_update().clone();
            if current.interval.is_zero() || current.targets.is_empty() {
                if plan.changed().await.is_err() {
                    return; // the writer has stopped
                }
                continue;
            }
            // The load just resolved every name: the first round is one interval later.
            tokio::select! {
                _ = tokio::time::sleep(current.interval) => {}
                changed = plan.changed() => match changed {
                    Ok(()) => continue,
                    Err(_) => return,
                },
            }
            for target in current.targets {
                let result = lookup(&resolve, &target).await;
                if tx.send(Command::Resolved(Answer { target, result })).is_err() {
                    return;
                }
            }
        }
    });
}

async fn lookup(resolve: &Resolver, target: &Target) -> Result<Vec<SocketAddr>, String> {
    let resolve = resolve.clone();
    let (host, port) = (target.host.clone(), target.port);
    let lookup = tokio::task::spawn_blocking(move || resolve(&host, port));
    match tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await {
        Ok(Ok(Ok(addresses))) => Ok(addresses),
        Ok(Ok(Err(e))) => Err(e.to_string()),
        Ok(Err(e)) => Err(format!("the lookup failed: {e}")),
        Err(_) => Err(format!("no answer within {LOOKUP_TIMEOUT:?}")),
    }
}
