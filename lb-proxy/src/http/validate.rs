//! Requests refused before any backend sees them.
use http::{Method, Request, StatusCode, Version, header};

use super::body::ProxyBody;
use super::conn::ConnCtx;
use super::respond::error_response;

pub(crate) fn refuse<B: http_body::Body>(req: &Request<B>, ctx: &ConnCtx) -> Option<http::Response<ProxyBody>> {
    let limits = &ctx.vip.spec.options.limits;
    let headers = req.headers();
    // The HTTP/1 head parser refuses this as it reads (and the size limits below): h2 heads
    // are checked here.
    let h2 = req.version() == Version::HTTP_2;
    if h2 && headers.contains_key(header::CONTENT_LENGTH) && headers.contains_key(header::TRANSFER_ENCODING) {
        // Ambiguous framing is how requests get smuggled: never forward, close the connection.
        return Some(error_response(StatusCode::BAD_REQUEST, true));
    }
    // RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host; h2 may carry :authority instead.
    let hosts = headers.get_all(header::HOST).iter().count();
    let needs_host = req.version() == Version::HTTP_11 && req.uri().authority().is_none();
    if hosts > 1 || (hosts == 0 && needs_host) {
        return Some(error_response(StatusCode::BAD_REQUEST, true));
    }
    let target_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len())
        + req.uri().authority().map_or(0, |a| a.as_str().len());
    if target_len > limits.max_request_line {
        return Some(error_response(StatusCode::URI_TOO_LONG, true));
    }
    if h2 {
        let head_bytes: usize = headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
        if headers.len() > limits.max_headers || head_bytes > limits.max_header_bytes {
            return Some(error_response(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, true));
        }
    }
    if limits.body_too_large(req.body().size_hint().exact()) {
        // The body is not read: the connection closes after the answer.
        return Some(error_response(StatusCode::PAYLOAD_TOO_LARGE, true));
    }
    if req.method() == Method::CONNECT {
        return Some(error_response(StatusCode::METHOD_NOT_ALLOWED, false));
    }
    None
}
