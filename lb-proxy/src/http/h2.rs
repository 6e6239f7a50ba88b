//! Serving an h2 client connection (ALPN h2, or h2c with prior knowledge) with hyper: below
//! `server` (which serves TLS connections that chose h2) and `h1` (which hands on a plain
//! connection that opens with the h2 preface).
use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures_util::stream::{FuturesUnordered, Stream};
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
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
        // Boxed: hyper moves every stream's future several times on its way to the executor
        // (`StreamExec`); the request's whole state machine moved each time cost kilobytes of
        // copies per request, a pointer does not.
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
    let mut stream_set = Streams::default();
    let mut b = http2::Builder::new(stream_set.exec.clone());
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
        r = poll_fn(|cx| stream_set.poll_with(conn.as_mut(), cx)) => { log_end(r); false }
        _ = tasks.stop.raised() => true,
        never = watching.as_mut() => match never {},
    };
    if stopping {
        conn.as_mut().graceful_shutdown();
        tokio::select! {
            biased;
            r = poll_fn(|cx| stream_set.poll_with(conn.as_mut(), cx)) => log_end(r),
            _ = tasks.force.raised() => return,
            never = watching.as_mut() => match never {},
        }
    }
    // Streams left when the connection has ended run to their end, as tasks of their own did:
    // with the connection gone, that is at their next wake-up.
    tokio::select! {
        biased;
        () = poll_fn(|cx| stream_set.poll_all(cx)) => {}
        _ = tasks.force.raised() => {}
    }
}

type StreamTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// hyper's executor for one connection's streams: it hands each stream's future to the
/// connection's own task (`Streams`) instead of spawning a task per stream. A tokio task per
/// stream cost its creation, scheduling and end, with moves of the stream's future into the
/// task's cell; the connection's task, woken once for all the streams that are ready, polls
/// only those.
#[derive(Clone, Default)]
struct StreamExec(Arc<Inbox>);

#[derive(Default)]
struct Inbox {
    new: Mutex<Vec<StreamTask>>,
    /// Whether `new` may hold any: read on every poll without taking the lock.
    any: AtomicBool,
}

impl<F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F> for StreamExec {
    fn execute(&self, fut: F) {
        self.0.new.lock().unwrap_or_else(PoisonError::into_inner).push(Box::pin(fut));
        self.0.any.store(true, Relaxed);
    }
}

/// The streams of one connection, polled by the connection's task.
#[derive(Default)]
struct Streams {
    /// Where hyper puts the streams it takes in (as it is polled).
    exec: StreamExec,
    running: FuturesUnordered<StreamTask>,
}

impl Streams {
    /// Polls the streams that are ready, then the connection; streams it took in are polled
    /// at once (their requests leave for backends in this turn). Ready when the connection ends.
    fn poll_with<C: Future>(&mut self, conn: Pin<&mut C>, cx: &mut Context<'_>) -> Poll<C::Output> {
        // Streams first: the responses they hand to h2 are written by the connection's poll.
        let _ = self.poll_all(cx);
        let r = conn.poll(cx);
        if self.exec.0.any.load(Relaxed) {
            let _ = self.poll_all(cx);
        }
        r
    }

    /// Moves the streams hyper handed over into the running set.
    fn take_new(&mut self) {
        if !self.exec.0.any.swap(false, Relaxed) {
            return;
        }
        let mut new = self.exec.0.new.lock().unwrap_or_else(PoisonError::into_inner);
        for fut in new.drain(..) {
            self.running.push(fut);
        }
    }

    /// Polls the ready streams (and those handed over meanwhile); Ready once none is left.
    fn poll_all(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            self.take_new();
            match Pin::new(&mut self.running).poll_next(cx) {
                Poll::Ready(Some(())) => {}
                Poll::Ready(None) if !self.exec.0.any.load(Relaxed) => return Poll::Ready(()),
                Poll::Ready(None) => {}
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

fn log_end(r: Result<(), hyper::Error>) {
    if let Err(e) = r {
        tracing::debug!(error = %e, "client connection ended with an error");
    }
}
