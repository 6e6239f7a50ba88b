//! Upgraded connections (WebSocket and other `Upgrade:` protocols): once the backend answers
//! 101, both sides' raw streams are joined and relayed until either closes, or until nothing
//! moved either way for `timeouts.tunnel`.
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;

use super::body::InFlight;
use super::forward::ConnCtx;
use super::upstream::Conn;

/// Relays between the two upgraded streams; `hold` keeps the backend's active count and
/// maxconn slot taken for the tunnel's lifetime.
pub(crate) fn spawn_tunnel(client: OnUpgrade, backend: Box<Conn>, hold: InFlight, ctx: &ConnCtx) {
    let mut force = ctx.tasks.force.clone();
    let idle = ctx.vip.spec.options.timeouts.tunnel;
    ctx.tasks.tracker.spawn(async move {
        let relay = async move {
            let Ok(c) = client.await else {
                return;
            };
            let mut c = TokioIo::new(c);
            // What the backend sent right after its 101 head was read with it.
            if !backend.buf.is_empty() && c.write_all(&backend.buf).await.is_err() {
                return;
            }
            if let Err(e) = crate::relay::copy_with_idle(c, backend.stream, idle).await {
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
