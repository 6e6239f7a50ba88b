//! Serving the client connections of an HTTP VIP.
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_util::either::Either;

use super::h2::serve_h2;
use crate::shutdown::Tasks;
use crate::vip::Vip;

/// Answers a client refused before it is served (a whole response: 503 for a VIP at its
/// connection limit, 429 for a client at its own), giving it a second to take it.
pub(crate) async fn refuse_connection(mut stream: TcpStream, response: &'static [u8]) {
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(response)).await;
    let _ = stream.shutdown().await;
}

/// Serves a plain (not TLS) client connection accepted on this worker until it ends: HTTP/1.1,
/// or h2c with prior knowledge. `'static`, and inlined so that the acceptor builds the
/// serving's future in the task's box.
#[inline(always)]
pub(crate) fn serve_plain(
    stream: TcpStream,
    client: SocketAddr,
    vip: Arc<Vip>,
    tasks: Tasks,
) -> impl Future<Output = ()> + Send + 'static {
    super::h1::serve(stream, client, vip, tasks, false)
}

/// Serves one client connection until it ends: TLS (ALPN h2 or HTTP/1.1) on VIPs that
/// terminate it, else HTTP/1.1 or h2c with prior knowledge (a plain connection handed to
/// another worker; one served where it was accepted gets [`serve_plain`]). Not an async fn:
/// a plain connection's future is the HTTP/1 serving's own, handed to the caller to await
/// where it lives, since each level of async fn around it would copy its whole state
/// (kilobytes) once more as it first runs. The TLS and h2 paths are boxed: their states are large, and
/// inline they would make every connection's task several times the size plain HTTP/1 needs.
pub(crate) fn serve_connection<'a>(
    stream: TcpStream,
    client: SocketAddr,
    vip: &'a Arc<Vip>,
    tasks: Tasks,
) -> Either<Pin<Box<dyn Future<Output = ()> + Send + 'a>>, impl Future<Output = ()> + Send + 'a> {
    let Some(tls) = &vip.tls else {
        // Plain connections are HTTP/1 until their first bytes turn out to be the h2 preface.
        return Either::Right(serve_plain(stream, client, vip.clone(), tasks));
    };
    let timeouts = &vip.spec.options.timeouts;
    Either::Left(Box::pin(async move {
        let Some((stream, h2)) = crate::tls::accept(tls, stream, timeouts.handshake).await else {
            vip.counters.tls_failures.fetch_add(1, Relaxed);
            return;
        };
        match h2 {
            true => serve_h2(stream, client, vip, tasks, true).await,
            false => super::h1::serve(stream, client, vip.clone(), tasks, true).await,
        }
    }))
}
