//! Requests refused before any backend sees them.
use http::{Method, StatusCode, Version, header};

use super::body::ProxyBody;
use super::conn::{ConnCtx, RequestLine};
use super::fields::Fields;
use super::respond::error_response;

/// The answer to a request refused here: `req` and `headers` its head, `body_size` its body's
/// length when known.
pub(crate) fn refuse(
    req: &RequestLine,
    headers: &impl Fields,
    body_size: Option<u64>,
    ctx: &ConnCtx,
) -> Option<http::Response<ProxyBody>> {
    let limits = &ctx.vip.spec.options.limits;
    // The HTTP/1 head parser refuses this as it reads (and the size limits below): h2 heads
    // are checked here.
    let h2 = req.version == Version::HTTP_2;
    if h2 && headers.has(&header::CONTENT_LENGTH) && headers.has(&header::TRANSFER_ENCODING) {
        // Ambiguous framing is how requests get smuggled: never forward, close the connection.
        return Some(error_response(StatusCode::BAD_REQUEST, true));
    }
    // RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host; h2 may carry :authority instead.
    let hosts = headers.hint().map_or_else(|| headers.values(&header::HOST).count(), |p| usize::from(p.hosts));
    let needs_host = req.version == Version::HTTP_11 && req.uri.authority().is_none();
    if hosts > 1 || (hosts == 0 && needs_host) {
        return Some(error_response(StatusCode::BAD_REQUEST, true));
    }
    let target_len =
        req.uri.path_and_query().map_or(0, |p| p.as_str().len()) + req.uri.authority().map_or(0, |a| a.as_str().len());
    if target_len > limits.max_request_line {
        return Some(error_response(StatusCode::URI_TOO_LONG, true));
    }
    if h2 {
        let (count, head_bytes) = headers.each().fold((0, 0), |(c, b), (n, v)| (c + 1, b + n.len() + v.len() + 4));
        if count > limits.max_headers || head_bytes > limits.max_header_bytes {
            return Some(error_response(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, true));
        }
    }
    if limits.body_too_large(body_size) {
        // The body is not read: the connection closes after the answer.
        return Some(error_response(StatusCode::PAYLOAD_TOO_LARGE, true));
    }
    if req.method == Method::CONNECT {
        return Some(error_response(StatusCode::METHOD_NOT_ALLOWED, false));
    }
    None
}
