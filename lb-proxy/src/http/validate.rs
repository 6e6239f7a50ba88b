//! Requests refused before any backend sees them.
use http::{Method, StatusCode, Version};

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
    // The HTTP/1 head parser refuses ambiguous framing and oversized heads as it reads, and
    // notes the Host fields (`hint`): h2 heads are checked here, in one pass over the fields
    // (a map's lookups by name cost more than the pass).
    let h2 = req.version == Version::HTTP_2;
    let seen = match headers.hint() {
        Some(p) => Seen { hosts: usize::from(p.hosts), ..Seen::default() },
        None => Seen::of(headers),
    };
    if h2 && seen.content_length && seen.transfer_encoding {
        // Ambiguous framing is how requests get smuggled: never forward, close the connection.
        return Some(error_response(StatusCode::BAD_REQUEST, true));
    }
    // RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host; h2 may carry :authority instead.
    let needs_host = req.version == Version::HTTP_11 && req.uri.authority().is_none();
    if seen.hosts > 1 || (seen.hosts == 0 && needs_host) {
        return Some(error_response(StatusCode::BAD_REQUEST, true));
    }
    let target_len =
        req.uri.path_and_query().map_or(0, |p| p.as_str().len()) + req.uri.authority().map_or(0, |a| a.as_str().len());
    if target_len > limits.max_request_line {
        return Some(error_response(StatusCode::URI_TOO_LONG, true));
    }
    if h2 && (seen.count > limits.max_headers || seen.bytes > limits.max_header_bytes) {
        return Some(error_response(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, true));
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

/// What the checks read of a request's fields.
#[derive(Default)]
struct Seen {
    hosts: usize,
    content_length: bool,
    transfer_encoding: bool,
    /// The fields, and their size as an HTTP/1 head would carry them.
    count: usize,
    bytes: usize,
}

impl Seen {
    fn of(headers: &impl Fields) -> Seen {
        let mut seen = Seen::default();
        for (name, value) in headers.each() {
            seen.count += 1;
            seen.bytes += name.len() + value.len() + 4;
            match name {
                b"host" => seen.hosts += 1,
                b"content-length" => seen.content_length = true,
                b"transfer-encoding" => seen.transfer_encoding = true,
                _ => {}
            }
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pass_sees_hosts_framing_and_size() {
        let mut map = http::HeaderMap::new();
        map.append("host", "a".parse().unwrap());
        map.append("host", "b".parse().unwrap());
        map.append("content-length", "1".parse().unwrap());
        map.append("x-a", "yes".parse().unwrap());
        let seen = Seen::of(&map);
        assert_eq!((seen.hosts, seen.count, seen.bytes), (2, 4, 5 + 5 + 15 + 6 + 4 * 4));
        assert!(seen.content_length && !seen.transfer_encoding);
        map.append("transfer-encoding", "chunked".parse().unwrap());
        assert!(Seen::of(&map).transfer_encoding);
        assert_eq!(Seen::of(&http::HeaderMap::new()).count, 0);
    }
}
