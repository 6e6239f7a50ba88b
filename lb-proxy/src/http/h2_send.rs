//! Sending an h2 stream's response: its head, then its body as the client's flow-control
//! window lets it through. A client that stops taking a stream's data (its window stays
//! shut, or it stops reading the connection, which then holds no more of the stream's data)
//! would leave the body, and the backend connection it holds, waiting for ever: the h2 form
//! of a client that stops reading. A stream that waits for room for `timeouts.send` is cut
//! (reset, its backend freed), and the connection serves on. A body waiting for its backend
//! is not the client's stall: the body timeout covers that.
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::task::Poll;
use std::time::Duration;

use ::h2::server::SendResponse;
use ::h2::{Reason, SendStream};
use bytes::Bytes;
use http_body::{Body, Frame};

use super::body::ProxyBody;
use super::conn::ConnCtx;
use crate::error::BoxError;

/// Why a response's body was not sent whole.
enum Cut {
    /// The client reset the stream, or the connection ended.
    Gone,
    /// The client took nothing for the send timeout.
    Stalled,
    Body(BoxError),
}

pub(crate) async fn send(resp: http::Response<ProxyBody>, mut respond: SendResponse<Bytes>, ctx: &ConnCtx) {
    let (parts, mut body) = resp.into_parts();
    let ended = body.is_end_stream();
    let mut out = match respond.send_response(http::Response::from_parts(parts, ()), ended) {
        Ok(s) => s,
        Err(e) => return tracing::debug!(error = %e, "h2 response head not sent"),
    };
    if ended {
        return;
    }
    match pipe(&mut body, &mut out, ctx.vip.spec.options.timeouts.send).await {
        Ok(()) | Err(Cut::Gone) => {}
        Err(Cut::Stalled) => {
            tracing::debug!("an h2 client took no byte of a response for the send timeout");
            ctx.vip.counters.client_timeouts.fetch_add(1, Relaxed);
            out.send_reset(Reason::INTERNAL_ERROR);
        }
        Err(Cut::Body(e)) => {
            tracing::debug!(error = %e, "h2 response body failed");
            out.send_reset(Reason::INTERNAL_ERROR);
        }
    }
    // The body, and the backend connection it holds, is dropped here.
}

async fn pipe(body: &mut ProxyBody, out: &mut SendStream<Bytes>, limit: Duration) -> Result<(), Cut> {
    loop {
        // The next frame is asked for before any window is reserved: a reservation would pin
        // part of the connection's window while the backend is awaited. While it is, a
        // client's RST_STREAM ends the stream at once, its backend freed.
        let frame = poll_fn(|cx| match Pin::new(&mut *body).poll_frame(cx) {
            Poll::Ready(f) => Poll::Ready(Ok(f)),
            Poll::Pending => out.poll_reset(cx).map(|_| Err(Cut::Gone)),
        })
        .await?;
        let mut data = match frame {
            None => return out.send_data(Bytes::new(), true).map_err(|_| Cut::Gone),
            Some(Err(e)) => return Err(Cut::Body(e)),
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(f) => return end_with(out, f),
            },
        };
        let last = body.is_end_stream();
        if data.is_empty() {
            if last {
                return out.send_data(data, true).map_err(|_| Cut::Gone);
            }
            continue;
        }
        while !data.is_empty() {
            out.reserve_capacity(data.len());
            let room = capacity(out, limit).await?;
            let part = data.split_to(room.min(data.len()));
            out.send_data(part, last && data.is_empty()).map_err(|_| Cut::Gone)?;
        }
        if last {
            return Ok(());
        }
    }
}

/// Ends the stream with a frame that is not data: trailers, or (none known) nothing.
fn end_with(out: &mut SendStream<Bytes>, f: Frame<Bytes>) -> Result<(), Cut> {
    match f.into_trailers() {
        Ok(t) => out.send_trailers(t),
        Err(_) => out.send_data(Bytes::new(), true),
    }
    .map_err(|_| Cut::Gone)
}

/// Waits for room in the stream's window (reserved before), for at most `limit`.
async fn capacity(out: &mut SendStream<Bytes>, limit: Duration) -> Result<usize, Cut> {
    // Made only when the room is not there at once: most writes find it.
    let mut timer: Option<Pin<Box<tokio::time::Sleep>>> = None;
    poll_fn(|cx| {
        // Room already assigned (as hyper does it: `poll_capacity` tells of changes only).
        while out.capacity() == 0 {
            match out.poll_capacity(cx) {
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(Err(Cut::Gone)),
                Poll::Pending => {
                    let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                    return t.as_mut().poll(cx).map(|()| Err(Cut::Stalled));
                }
            }
        }
        Poll::Ready(Ok(out.capacity()))
    })
    .await
}
