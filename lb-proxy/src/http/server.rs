//! Serving the client connections of an HTTP VIP.
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::deadline::ClientIo;
use super::forward::{ConnCtx, handle};
use super::respond::BUSY_RESPONSE;
use super::shared::ConnShared;
use super::sniff::Sniffer;
use crate::proxy_protocol;
use crate::shutdown::Tasks;
use crate::vip::Vip;
use lb_common::ip_bytes;

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// hyper's own limit on header fields. Given explicitly, even the same number, hyper builds
/// its header index array element by element for every head (4.5% of a keep-alive request's
/// instructions under callgrind); left unset, it takes a ready array of this size.
const HYPER_DEFAULT_MAX_HEADERS: usize = 100;

/// Answers 503 to a client refused before hyper serves it (VIP at its connection limit).
pub(crate) async fn refuse_busy(mut stream: TcpStream) {
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(BUSY_RESPONSE)).await;
    let _ = stream.shutdown().await;
}

/// Serves one client connection until it ends: TLS (ALPN h2 or HTTP/1.1) on VIPs that
/// terminate it, else HTTP/1.1 or h2c with prior knowledge.
pub(crate) async fn serve_connection(stream: TcpStream, client: SocketAddr, vip: &Arc<Vip>, tasks: Tasks) {
    let timeouts = &vip.spec.options.timeouts;
    if let Some(tls) = &vip.tls {
        let Some((stream, h2)) = crate::tls::accept(tls, stream, timeouts.handshake).await else {
            vip.counters.tls_failures.fetch_add(1, Relaxed);
            return;
        };
        return serve_http(stream, client, vip, tasks, h2, true).await;
    }
    let h2 = match tokio::time::timeout(timeouts.client_header, starts_with_h2_preface(&stream)).await {
        Ok(Ok(h2)) => h2,
        // Silent or gone before sending anything.
        _ => return,
    };
    serve_http(stream, client, vip, tasks, h2, false).await
}

async fn serve_http<S>(stream: S, client: SocketAddr, vip: &Arc<Vip>, tasks: Tasks, h2: bool, https: bool)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let spec = &vip.spec;
    let opts = &spec.options;
    let shared = (!h2).then(ConnShared::new);
    let ctx = Arc::new(ConnCtx {
        vip: vip.clone(),
        client,
        client_hash: lb_common::hash::client_hash(&ip_bytes(client.ip()).0, spec.hash_seed),
        proxy_header: proxy_protocol::header(opts.proxy_protocol, client, vip.local_addr),
        shared: shared.clone(),
        https,
        requests: AtomicU64::new(0),
        tasks: tasks.clone(),
    });
    let svc = service_fn(move |req| {
        let ctx = ctx.clone();
        async move { Ok::<_, Infallible>(handle(req, &ctx).await) }
    });
    let mut stop = tasks.stop.clone();
    let mut force = tasks.force.clone();
    // Serves until done; on stop, finishes in-flight requests (graceful), on force, drops.
    macro_rules! drive {
        ($conn:expr) => {{
            let conn = $conn;
            tokio::pin!(conn);
            let stopping = tokio::select! {
                biased;
                r = conn.as_mut() => { log_end(r); false }
                _ = stop.wait_for(|s| *s) => true,
            };
            if stopping {
                conn.as_mut().graceful_shutdown();
                tokio::select! {
                    r = conn.as_mut() => log_end(r),
                    _ = force.wait_for(|f| *f) => {}
                }
            }
        }};
    }
    if h2 {
        let mut b = http2::Builder::new(TokioExecutor::new());
        b.timer(TokioTimer::new())
            .max_concurrent_streams(opts.limits.h2_max_streams)
            .max_header_list_size(opts.limits.max_header_bytes.min(u32::MAX as usize) as u32)
            // A silent peer is found by pings; one that stays silent is dropped.
            .keep_alive_interval(opts.timeouts.idle)
            .keep_alive_timeout(opts.timeouts.client_header);
        drive!(b.serve_connection(TokioIo::new(stream), svc));
    } else {
        let shared = shared.expect("HTTP/1 connections have shared state");
        let mut b = http1::Builder::new();
        b.timer(TokioTimer::new())
            .keep_alive(!opts.close_after_response)
            // Off: `ClientIo` keeps the idle and header deadlines (and answers 408).
            .header_read_timeout(None)
            .max_header_size(opts.limits.max_header_bytes)
            // hyper's read buffer must hold a whole head; 8 KiB is its floor.
            .max_buf_size(opts.limits.max_header_bytes.max(8192));
        if opts.limits.max_headers != HYPER_DEFAULT_MAX_HEADERS {
            b.max_headers(opts.limits.max_headers);
        }
        let sniffer = Sniffer::new(stream, opts.limits.max_header_bytes, shared.clone());
        let io = ClientIo::new(sniffer, shared, vip.clone());
        drive!(b.serve_connection(TokioIo::new(io), svc).with_upgrades());
    }
}

fn log_end(r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "client connection ended with an error");
    }
}

/// Whether the client opens with the HTTP/2 preface (h2c prior knowledge). Peeks, so hyper
/// still reads every byte.
async fn starts_with_h2_preface(stream: &TcpStream) -> std::io::Result<bool> {
    let mut buf = [0u8; 24];
    loop {
        let n = stream.peek(&mut buf).await?;
        if n == 0 || buf[..n] != H2_PREFACE[..n] {
            return Ok(false);
        }
        if n == H2_PREFACE.len() {
            return Ok(true);
        }
        // A partial preface: wait for the rest (bounded by the caller's header timeout).
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
