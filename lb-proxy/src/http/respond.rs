//! Responses the proxy writes itself.
use http::{HeaderValue, Response, StatusCode, header};

use super::body::ProxyBody;

/// A short plain-text error response. `close` asks to end the connection after it (requests
/// whose framing cannot be trusted, so nothing after them on the connection can be either).
pub(crate) fn error_response(status: StatusCode, close: bool) -> Response<ProxyBody> {
    let text = format!("{} {}\n", status.as_u16(), status.canonical_reason().unwrap_or(""));
    let mut r = Response::new(ProxyBody::full(text));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    if close {
        r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// The whole HTTP/1.1 503 written to a client refused before it is served (VIP at its
/// connection limit).
pub(crate) const BUSY_RESPONSE: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 24\r\nconnection: close\r\n\r\n503 Service Unavailable\n";

/// The whole HTTP/1.1 429 written to a client refused before it is served because its address
/// holds `limits.max_connections_per_client` already.
pub(crate) const TOO_MANY_RESPONSE: &[u8] =
    b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: text/plain\r\ncontent-length: 22\r\nconnection: close\r\n\r\n429 Too Many Requests\n";

/// The whole 408 written to a client that did not finish a request head in time.
pub(crate) const TIMEOUT_RESPONSE: &[u8] = b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\ncontent-length: 20\r\nconnection: close\r\n\r\n408 Request Timeout\n";
