//! Serving an h2 client connection (ALPN h2, or h2c with prior knowledge) with hyper: below
//! `server` (which serves TLS connections that chose h2) and `h1` (which hands on a plain
//! connection that opens with the h2 preface).
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use super::body::{ProxyBody, backend_fields_into_map};
use super::conn::{ConnCtx, RequestLine};
use super::forward::handle;
use super::h2_send::SendWatch;
use crate::shutdown::Tasks;
use crate::vip::Vip;

/// Serves an h2 connection (ALPN h2, or h2c with prior knowledge) with hyper.
pub(crate) async fn serve_h2<S>(stream: S, client: SocketAddr, vip: &Arc<Vip>, tasks: Tasks, https: bool)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let opts = &vip.spec.options;
    let ctx = Arc::new(ConnCtx::new(vip, client, https));
    let watch = Arc::new(SendWatch::new(opts.timeouts.send));
    let streams = watch.clone();
    let svc = service_fn(move |req| {
        let (ctx, streams) = (ctx.clone(), streams.clone());
        // Boxed: hyper spawns every stream's future as a task of its own, and tokio moves a
        // future several times on its way into the task's cell; the request's whole state
        // machine moved each time cost kilobytes of copies per request, a pointer does not.
        Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            let fields = std::mem::take(&mut parts.headers);
            let mut resp = handle(RequestLine::of(parts), fields, body, &ctx).await;
            // What the backend's head carries, noted as it was parsed: hyper would look the
            // map up for Date and Content-Length on every response.
            let noted = resp.body().raw_fields().map(|f| f.present());
            // hyper writes the response from its map (made while the backend's connection,
            // which holds the fields, is still the response's).
            backend_fields_into_map(&mut resp, false);
            if !noted.is_some_and(|p| p.date)
                && !resp.headers().contains_key(http::header::DATE)
                && let Some(date) = super::h1::date_value()
            {
                resp.headers_mut().insert(http::header::DATE, date);
            }
            let length_in_map = noted.is_some_and(|p| p.content_length);
            Ok::<_, Infallible>(streams.watch(resp.map(ProxyBody::whole_if_buffered), length_in_map))
        })
    });
    let mut b = http2::Builder::new(TokioExecutor::new());
    b.timer(TokioTimer::new())
        // Date is added above, where the backend sent none.
        .auto_date_header(false)
        .max_concurrent_streams(opts.limits.h2_max_streams)
        .max_header_list_size(opts.limits.max_header_bytes.min(u32::MAX as usize) as u32)
        // A silent peer is found by pings; one that stays silent is dropped.
        .keep_alive_interval(opts.timeouts.idle)
        .keep_alive_timeout(opts.timeouts.client_header);
    let conn = b.serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    // Streams whose client stopped taking their response are cut while the connection runs.
    let cut = || {
        vip.counters.client_timeouts.fetch_add(1, Relaxed);
    };
    let watching = watch.run(cut);
    tokio::pin!(watching);
    // Serves until done; on stop, finishes in-flight requests (graceful), on force, drops.
    let stopping = tokio::select! {
        biased;
        r = conn.as_mut() => { log_end(r); false }
        _ = tasks.stop.raised() => true,
        never = watching.as_mut() => match never {},
    };
    if stopping {
        conn.as_mut().graceful_shutdown();
        tokio::select! {
            biased;
            r = conn.as_mut() => log_end(r),
            _ = tasks.force.raised() => {}
            never = watching.as_mut() => match never {},
        }
    }
}

fn log_end(r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "client connection ended with an error");
    }
}
