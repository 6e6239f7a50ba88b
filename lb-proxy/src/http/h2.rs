//! Serving an h2 client connection (ALPN h2, or h2c with prior knowledge) with the h2 crate:
//! below `server` (which serves TLS connections that chose h2) and `h1` (which hands on a
//! plain connection that opens with the h2 preface).
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};

use ::h2::RecvStream;
use ::h2::server::SendResponse;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};

use super::body::{ProxyBody, backend_fields_into_map};
use super::conn::{ConnCtx, RequestLine};
use super::forward::handle;
use super::h2_send::{H2Body, SendWatch};
use crate::error::BoxError;
use crate::shutdown::Tasks;
use crate::vip::Vip;

/// Serves an h2 connection (ALPN h2, or h2c with prior knowledge).
pub(crate) async fn serve_h2<S>(stream: S, client: SocketAddr, vip: &Arc<Vip>, tasks: Tasks, https: bool)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let opts = &vip.spec.options;
    let ctx = Arc::new(ConnCtx::new(vip, client, https));
    let watch = Arc::new(SendWatch::new(opts.timeouts.send));
    let mut b = ::h2::server::Builder::new();
    b.max_concurrent_streams(opts.limits.h2_max_streams)
        .max_header_list_size(opts.limits.max_header_bytes.min(u32::MAX as usize) as u32);
    let mut conn = match b.handshake::<_, Bytes>(stream).await {
        Ok(c) => c,
        Err(e) => return log_end(e),
    };
    let cut = || {
        vip.counters.client_timeouts.fetch_add(1, Relaxed);
    };
    let watching = watch.run(cut);
    tokio::pin!(watching);
    let mut stopping = false;
    loop {
        let next = tokio::select! {
            biased;
            r = conn.accept() => r,
            _ = tasks.stop.raised(), if !stopping => {
                stopping = true;
                conn.graceful_shutdown();
                continue;
            }
            _ = tasks.force.raised(), if stopping => return,
            never = watching.as_mut() => match never {},
        };
        match next {
            Some(Ok((req, respond))) => {
                let (ctx, watch) = (ctx.clone(), watch.clone());
                tokio::spawn(Box::pin(serve_stream(req, respond, ctx, watch)));
            }
            Some(Err(e)) => return log_end(e),
            None => return,
        }
    }
}

async fn serve_stream(
    req: http::Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    ctx: Arc<ConnCtx>,
    watch: Arc<SendWatch>,
) {
    let (mut parts, body) = req.into_parts();
    let fields = std::mem::take(&mut parts.headers);
    let mut resp = handle(RequestLine::of(parts), fields, InBody { rs: body, data_done: false }, &ctx).await;
    let noted = resp.body().raw_fields().map(|f| f.present());
    backend_fields_into_map(&mut resp, false);
    if !noted.is_some_and(|p| p.date)
        && !resp.headers().contains_key(http::header::DATE)
        && let Some(date) = super::h1::date_value()
    {
        resp.headers_mut().insert(http::header::DATE, date);
    }
    let length_in_map = noted.is_some_and(|p| p.content_length);
    let resp = resp.map(ProxyBody::whole_if_buffered);
    if !length_in_map
        && let Some(n) = resp.body().size_hint().exact()
        && !resp.headers().contains_key(http::header::CONTENT_LENGTH)
    {
        let mut resp = resp;
        resp.headers_mut().insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(n));
        return send(resp, respond, &watch, true).await;
    }
    send(resp, respond, &watch, length_in_map).await
}

async fn send(resp: http::Response<ProxyBody>, mut respond: SendResponse<Bytes>, watch: &SendWatch, length: bool) {
    let (parts, body) = resp.into_parts();
    let ended = body.is_end_stream();
    let mut out = match respond.send_response(http::Response::from_parts(parts, ()), ended) {
        Ok(s) => s,
        Err(e) => return tracing::debug!(error = %e, "h2 response head not sent"),
    };
    if ended {
        return;
    }
    let mut body: H2Body = watch.watch(http::Response::new(body), length).into_body();
    loop {
        let frame = match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            None => {
                let _ = out.send_data(Bytes::new(), true);
                return;
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "h2 response body failed");
                return out.send_reset(::h2::Reason::INTERNAL_ERROR);
            }
            Some(Ok(f)) => f,
        };
        let mut data = match frame.into_data() {
            Ok(d) => d,
            Err(f) => {
                if let Ok(t) = f.into_trailers() {
                    let _ = out.send_trailers(t);
                }
                return;
            }
        };
        let last = body.is_end_stream();
        if data.is_empty() {
            if last {
                let _ = out.send_data(data, true);
                return;
            }
            continue;
        }
        while !data.is_empty() {
            out.reserve_capacity(data.len());
            let room = match std::future::poll_fn(|cx| out.poll_capacity(cx)).await {
                Some(Ok(n)) => n,
                _ => return,
            };
            let part = data.split_to(room.min(data.len()));
            if out.send_data(part, last && data.is_empty()).is_err() {
                return;
            }
        }
        if last {
            return;
        }
    }
}

/// A request body as the h2 crate gives it, as the body `handle` takes.
struct InBody {
    rs: RecvStream,
    data_done: bool,
}

impl Body for InBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if !this.data_done {
            match this.rs.poll_data(cx) {
                Poll::Ready(Some(Ok(b))) => {
                    let _ = this.rs.flow_control().release_capacity(b.len());
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                Poll::Ready(None) => this.data_done = true,
                Poll::Pending => return Poll::Pending,
            }
        }
        match this.rs.poll_trailers(cx) {
            Poll::Ready(Ok(Some(t))) => Poll::Ready(Some(Ok(Frame::trailers(t)))),
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e.into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rs.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

fn log_end(e: ::h2::Error) {
    tracing::debug!(error = %e, "client connection ended with an error");
}
