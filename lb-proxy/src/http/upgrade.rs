//! Upgraded connections (WebSocket and other `Upgrade:` protocols): once the backend answers
//! 101, both sides' raw streams are joined and relayed until either closes.
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::body::InFlight;
use super::forward::ConnCtx;

/// Relays between the two upgraded streams; `hold` keeps the backend's active count and
/// maxconn slot taken for the tunnel's lifetime.
pub(crate) fn spawn_tunnel(client: OnUpgrade, backend: OnUpgrade, hold: InFlight, ctx: &ConnCtx) {
    let mut force = ctx.tasks.force.clone();
    ctx.tasks.tracker.spawn(async move {
        let relay = async move {
            let (Ok(c), Ok(b)) = tokio::join!(client, backend) else {
                return;
            };
            let (mut c, mut b) = (TokioIo::new(c), TokioIo::new(b));
            if let Err(e) = tokio::io::copy_bidirectional(&mut c, &mut b).await {
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
