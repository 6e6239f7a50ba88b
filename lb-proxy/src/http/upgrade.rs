//! Upgraded connections (WebSocket and other `Upgrade:` protocols): once the backend answers
//! 101, both sides' raw streams are joined and relayed until either closes, or until nothing
//! moved either way for `timeouts.tunnel`.
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::body::InFlight;
use super::forward::ConnCtx;

/// Relays between the two upgraded streams; `hold` keeps the backend's active count and
/// maxconn slot taken for the tunnel's lifetime.
pub(crate) fn spawn_tunnel(client: OnUpgrade, backend: OnUpgrade, hold: InFlight, ctx: &ConnCtx) {
    let mut force = ctx.tasks.force.clone();
    let idle = ctx.vip.spec.options.timeouts.tunnel;
    ctx.tasks.tracker.spawn(async move {
        let relay = async move {
            let (Ok(c), Ok(b)) = tokio::join!(client, backend) else {
                return;
            };
            let (c, b) = (TokioIo::new(c), TokioIo::new(b));
            if let Err(e) = crate::relay::copy_with_idle(c, b, idle).await {
                tracing::debug!(error = %e, "upgraded tunnel ended");
            }
        };
        tokio::select! {
            _ = relay => {}
            _ = force.wait_for(|f| *f) => {}
        }
        drop(hold);
    });
}
