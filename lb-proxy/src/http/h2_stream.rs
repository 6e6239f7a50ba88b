//! One stream of an h2 client connection: its request handled (`forward::handle`), its
//! response's head made ready for h2 and sent, its body streamed (`h2_send`).
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;

use ::h2::server::SendResponse;
use ::h2::{Reason, RecvStream};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, header};
use http_body::Body;

use super::body::backend_fields_into_map;
use super::conn::{ConnCtx, RequestLine};
use super::forward::handle;
use super::h2_recv::InBody;
use super::h2_send::send;

pub(crate) async fn serve_stream(req: http::Request<RecvStream>, mut respond: SendResponse<Bytes>, ctx: &ConnCtx) {
    let (mut parts, body) = req.into_parts();
    let fields = std::mem::take(&mut parts.headers);
    let Some(body) = InBody::of(body, &parts.method, &fields) else {
        tracing::debug!("an h2 CONNECT declared a body: reset");
        return respond.send_reset(Reason::INTERNAL_ERROR);
    };
    let mut handling = pin!(handle(RequestLine::of(parts), fields, body, ctx));
    // Polled first: most answers come before a reset would. While the backend is awaited, a
    // client's RST_STREAM ends the exchange: the request is dropped, and its backend
    // connection with it, rather than kept until the backend answers to no one.
    let answer = poll_fn(|cx| match handling.as_mut().poll(cx) {
        Poll::Ready(r) => Poll::Ready(Some(r)),
        Poll::Pending => respond.poll_reset(cx).map(|_| None),
    })
    .await;
    let Some(mut resp) = answer else {
        return tracing::debug!("an h2 client reset a stream whose backend was awaited");
    };
    // What the backend's head carries, noted as it was parsed: spares lookups in the map.
    let noted = resp.body().raw_fields().map(|f| f.present());
    // A head of the backend's own fields alone, which come without the hop-by-hop ones
    // (`backend_fields_into_map`): none of the fields h2 forbids is there to look for.
    let backend_only = noted.is_some() && resp.headers().is_empty();
    // The h2 crate writes the head from the map (made while the backend's connection, which
    // holds the fields, is still the response's).
    backend_fields_into_map(&mut resp, false);
    resp.body_mut().make_whole_if_buffered();
    let h = resp.headers_mut();
    if !noted.is_some_and(|p| p.date)
        && !h.contains_key(header::DATE)
        && let Some(date) = super::h1::date_value()
    {
        h.insert(header::DATE, date);
    }
    let body = resp.body();
    // A body whose size is known gets its Content-Length, as hyper gave it (a client then
    // knows a response cut short is).
    if !body.is_end_stream()
        && !noted.is_some_and(|p| p.content_length)
        && let Some(n) = body.size_hint().exact()
        && !resp.headers().contains_key(header::CONTENT_LENGTH)
    {
        resp.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    if !backend_only {
        strip_connection_fields(resp.headers_mut());
    }
    send(resp, respond, ctx).await;
}

/// Removes the fields h2 forbids (RFC 9113 §8.2.2), which the h2 crate would refuse to send
/// the head with: the proxy's own answers may carry `Connection: close` (meant for HTTP/1),
/// and header rules may add any field. A backend's hop-by-hop fields are left out already.
fn strip_connection_fields(h: &mut HeaderMap) {
    // One pass over the names first: most heads have none of these, and a pass costs less
    // than five lookups.
    let forbidden = |name: &header::HeaderName| {
        name == header::CONNECTION
            || name == header::TRANSFER_ENCODING
            || name == header::UPGRADE
            || name == header::TE
            || name.as_str() == "keep-alive"
            || name.as_str() == "proxy-connection"
    };
    if !h.keys().any(forbidden) {
        return;
    }
    // The fields a Connection field names are this connection's too.
    let named: Vec<String> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|n| n.trim().to_ascii_lowercase()))
        .collect();
    for n in named {
        h.remove(n.as_str());
    }
    for n in [header::CONNECTION, header::TRANSFER_ENCODING, header::UPGRADE, header::TE] {
        h.remove(n);
    }
    h.remove("keep-alive");
    h.remove("proxy-connection");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_fields_are_stripped_and_others_kept() {
        let mut h = HeaderMap::new();
        h.insert("content-type", "text/plain".parse().unwrap());
        strip_connection_fields(&mut h);
        assert_eq!(h.len(), 1);
        h.insert(header::CONNECTION, "close, x-hop".parse().unwrap());
        h.insert("x-hop", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert(header::TE, "trailers".parse().unwrap());
        strip_connection_fields(&mut h);
        assert_eq!(h.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["content-type"]);
    }
}
