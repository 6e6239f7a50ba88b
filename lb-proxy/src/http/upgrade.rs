//! Upgraded connections (WebSocket and other `Upgrade:` protocols): once the backend answers
//! 101 and the answer is written, both sides' raw streams are joined and relayed until either
//! closes, or until nothing moved either way for `timeouts.tunnel`.
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::body::Tunnel;

/// Relays between the client and the backend. `pending`: what the client sent after its
/// request head (already read); the backend's bytes read after its 101 head are in its
/// connection's buffer. The tunnel holds the backend's active count and maxconn slot.
pub(crate) async fn run_tunnel<C>(mut client: C, pending: BytesMut, tunnel: Tunnel, idle: Duration)
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let Tunnel { backend, hold } = tunnel;
    let mut backend = *backend;
    let early = async {
        if !pending.is_empty() {
            backend.stream.write_all(&pending).await?;
            backend.stream.flush().await?;
        }
        if !backend.buf.is_empty() {
            client.write_all(&backend.buf).await?;
            client.flush().await?;
        }
        std::io::Result::Ok(())
    };
    if early.await.is_ok()
        && let Err(e) = crate::relay::copy_with_idle(client, backend.stream, idle).await
    {
        tracing::debug!(error = %e, "upgraded tunnel ended");
    }
    drop(hold);
}
