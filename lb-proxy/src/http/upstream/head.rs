//! HTTP/1.1 heads on a backend connection: the request head written, the response head parsed
//! (RFC 9112), and how the response body is framed.
use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::header;
use http::{Method, StatusCode, Version, response};

use super::BackendFault;
use crate::http::fields::{self, Fields, RawFields, text};
use crate::http::headers::persistent;

/// Response header fields a backend may send; more is a malformed response (hyper's client
/// limit is 100).
const MAX_RESPONSE_HEADERS: usize = 128;
/// Largest response head read; a longer one is a malformed response.
pub(crate) const MAX_RESPONSE_HEAD: usize = 64 * 1024;

/// How the request body is framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestFraming {
    None,
    Length,
    Chunked,
}

/// Appends the head of `req` (method, target; its map is not read) with `headers` to `out`.
/// Origin-form target, names lower-case, the body's framing added when its headers do not
/// give it.
pub(crate) fn encode_request<B: http_body::Body>(
    req: &super::OutRequest<B>,
    headers: &impl Fields,
    out: &mut Vec<u8>,
) -> RequestFraming {
    let body = &req.body;
    // Looked for only when there is a body: most requests have none.
    let has_length = !body.is_end_stream()
        && headers.hint().is_none_or(|p| p.content_length)
        && headers.has(&header::CONTENT_LENGTH);
    let framing = if body.is_end_stream() {
        RequestFraming::None
    } else if has_length || body.size_hint().exact().is_some() {
        RequestFraming::Length
    } else {
        RequestFraming::Chunked
    };
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.uri.path_and_query().map_or("/", |p| p.as_str()).as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers.each() {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    match framing {
        RequestFraming::Length if !has_length => {
            let len = body.size_hint().exact().unwrap_or(0);
            out.extend_from_slice(format!("content-length: {len}\r\n").as_bytes());
        }
        RequestFraming::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        _ => {}
    }
    out.extend_from_slice(b"\r\n");
    framing
}

/// Takes the response head off the front of `buf`: None while it is incomplete. Its fields go
/// to `fields` (the parts' map stays empty): see `RawFields`.
pub(crate) fn parse_response(buf: &mut BytesMut, raw: &mut RawFields) -> Result<Option<response::Parts>, BackendFault> {
    let (len, code, minor, reason) = {
        let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_RESPONSE_HEADERS];
        let mut resp = httparse::Response::new(&mut []);
        let len =
            match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut resp, buf, &mut fields) {
                Ok(httparse::Status::Complete(len)) => len,
                Ok(httparse::Status::Partial) if buf.len() >= MAX_RESPONSE_HEAD => {
                    return Err(BackendFault::Malformed("head too large"));
                }
                Ok(httparse::Status::Partial) => return Ok(None),
                Err(e) => return Err(BackendFault::Malformed(parse_error(e))),
            };
        raw.record(buf, len, resp.headers);
        let reason = resp.reason.filter(|r| !r.is_empty()).map(|r| {
            let at = fields::offset(buf, r.as_bytes()) as usize;
            at..at + r.len()
        });
        (len, resp.code.unwrap_or(0), resp.version.unwrap_or(1), reason)
    };
    let status = StatusCode::from_u16(code).map_err(|_| BackendFault::Malformed("status"))?;
    let mut r = http::Response::new(());
    *r.status_mut() = status;
    *r.version_mut() = if minor == 0 { Version::HTTP_10 } else { Version::HTTP_11 };
    // A reason phrase other than the standard one reaches the client as the backend sent it.
    if let Some(range) = reason {
        let phrase = &buf[range];
        if status.canonical_reason().map(str::as_bytes) != Some(phrase)
            && let Ok(phrase) = hyper::ext::ReasonPhrase::try_from(phrase)
        {
            r.extensions_mut().insert(phrase);
        }
    }
    bytes::Buf::advance(buf, len);
    Ok(Some(r.into_parts().0))
}

fn parse_error(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::TooManyHeaders => "too many header fields",
        httparse::Error::Status => "status line",
        httparse::Error::Version => "version",
        _ => "head syntax",
    }
}

/// How a response's body is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ResponseFraming {
    /// No body: HEAD, 204, 304.
    Empty,
    Length(u64),
    Chunked,
    /// Until the backend closes: the connection cannot be reused.
    UntilClose,
    /// 101 to a request that asked to switch: the connection becomes a tunnel.
    Upgrade,
}

/// The response body's framing, and whether the connection may serve another request after it.
pub(crate) fn response_framing(
    method: &Method,
    upgrade_asked: bool,
    parts: &response::Parts,
    h: &RawFields,
) -> Result<(ResponseFraming, bool), BackendFault> {
    let present = h.present();
    let keep_alive = persistent(parts.version, present);
    let status = parts.status;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return if upgrade_asked {
            Ok((ResponseFraming::Upgrade, false))
        } else {
            Err(BackendFault::Malformed("101 to a request that did not ask to switch"))
        };
    }
    if *method == Method::HEAD || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok((ResponseFraming::Empty, keep_alive));
    }
    if let Some(last) = present.transfer_encoding.then(|| h.values(&header::TRANSFER_ENCODING).last()).flatten() {
        let chunked = parts.version == Version::HTTP_11
            && text(last).and_then(|v| v.rsplit(',').next()).is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
        // Transfer-Encoding overrides Content-Length; a response with both is closed after.
        let keep_alive = keep_alive && !present.content_length;
        return Ok(if chunked { (ResponseFraming::Chunked, keep_alive) } else { (ResponseFraming::UntilClose, false) });
    }
    let mut length = None;
    // Every number the fields give is the same one.
    let mut note = |n: u64| match length {
        Some(l) if l != n => Err(BackendFault::Malformed("conflicting content-length")),
        _ => {
            length = Some(n);
            Ok(())
        }
    };
    // Only present fields are searched (`present`: a response noted while it was parsed).
    let values = present.content_length.then(|| h.values(&header::CONTENT_LENGTH));
    for v in values.into_iter().flatten() {
        // Digits alone, the common value, are the one number it holds: no split and trim.
        if let Some(n) = fields::decimal(v) {
            note(n)?;
            continue;
        }
        for part in v.split(|&b| b == b',') {
            note(fields::decimal(part.trim_ascii()).ok_or(BackendFault::Malformed("content-length"))?)?;
        }
    }
    Ok(match length {
        Some(0) => (ResponseFraming::Empty, keep_alive),
        Some(n) => (ResponseFraming::Length(n), keep_alive),
        None => (ResponseFraming::UntilClose, false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::Full;

    fn head(wire: &'static [u8]) -> (response::Parts, RawFields) {
        let mut raw = RawFields::default();
        let parts = parse_response(&mut BytesMut::from(wire), &mut raw).unwrap().expect("complete");
        (parts, raw)
    }

    fn parse(wire: &'static [u8]) -> Result<Option<response::Parts>, BackendFault> {
        parse_response(&mut BytesMut::from(wire), &mut RawFields::default())
    }

    fn framing(method: Method, wire: &'static [u8]) -> Result<(ResponseFraming, bool), BackendFault> {
        let (parts, raw) = head(wire);
        response_framing(&method, false, &parts, &raw)
    }

    #[test]
    fn request_heads_are_origin_form_and_framed() {
        let out_request = |method: Method, target: &'static str, body| super::super::OutRequest {
            method,
            uri: http::Uri::from_static(target),
            body,
        };
        let mut fields = http::HeaderMap::new();
        let mut out = Vec::new();
        fields.insert("host", "x".parse().unwrap());
        let req = out_request(Method::GET, "/a?b=1", Full::new(Bytes::new()));
        assert_eq!(encode_request(&req, &fields, &mut out), RequestFraming::None);
        assert_eq!(out, b"GET /a?b=1 HTTP/1.1\r\nhost: x\r\n\r\n");
        out.clear();
        fields.clear();
        let req = out_request(Method::POST, "/p", Full::new(Bytes::from_static(b"abc")));
        assert_eq!(encode_request(&req, &fields, &mut out), RequestFraming::Length);
        assert_eq!(out, b"POST /p HTTP/1.1\r\ncontent-length: 3\r\n\r\n");
        out.clear();
        fields.insert("content-length", "3".parse().unwrap());
        encode_request(&req, &fields, &mut out);
        assert_eq!(out, b"POST /p HTTP/1.1\r\ncontent-length: 3\r\n\r\n", "an existing length is not repeated");
    }

    #[test]
    fn response_heads_parse_with_shared_values_and_reason() {
        let (h, raw) = head(b"HTTP/1.1 200 Fine\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 5\r\n\r\nhello");
        assert_eq!(h.status, 200);
        assert_eq!(
            raw.to_map(false, http::HeaderMap::new(), 0).unwrap().get_all("x-a").iter().collect::<Vec<_>>(),
            ["1", "2"]
        );
        let names: Vec<_> = raw.each().map(|(n, _)| n).collect();
        assert_eq!(names, [&b"x-a"[..], b"x-a", b"content-length"], "names lower-cased, in order");
        assert_eq!(h.extensions.get::<hyper::ext::ReasonPhrase>().unwrap().as_bytes(), b"Fine");
        assert!(head(b"HTTP/1.1 200 OK\r\n\r\n").0.extensions.get::<hyper::ext::ReasonPhrase>().is_none());
        assert!(parse(b"HTTP/1.1 200 OK\r\nX-A: 1\r\n").unwrap().is_none());
        assert!(parse(b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n").is_err(), "obs-fold");
        assert!(parse(b"HTTX/1.1 200 OK\r\n\r\n").is_err());
        let mut buf = BytesMut::from(&b"HTTP/1.1 204 No Content\r\n\r\nrest"[..]);
        parse_response(&mut buf, &mut RawFields::default()).unwrap().unwrap();
        assert_eq!(&buf[..], b"rest", "only the head is taken");
    }

    #[test]
    fn response_framing_follows_rfc_9112() {
        use ResponseFraming::*;
        assert_eq!(framing(Method::GET, b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n").unwrap(), (Length(3), true));
        assert_eq!(framing(Method::HEAD, b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n").unwrap(), (Empty, true));
        assert_eq!(framing(Method::GET, b"HTTP/1.1 304 Not Modified\r\n\r\n").unwrap(), (Empty, true));
        assert_eq!(
            framing(Method::GET, b"HTTP/1.1 200 OK\r\ncontent-length: 3, 3\r\n\r\n").unwrap(),
            (Length(3), true)
        );
        assert!(framing(Method::GET, b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n").is_err());
        assert!(framing(Method::GET, b"HTTP/1.1 200 OK\r\ncontent-length: +3\r\n\r\n").is_err());
        assert_eq!(
            framing(Method::GET, b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n").unwrap(),
            (Chunked, true)
        );
        assert_eq!(
            framing(Method::GET, b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 9\r\n\r\n")
                .unwrap(),
            (Chunked, false)
        );
        assert_eq!(
            framing(Method::GET, b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n").unwrap(),
            (UntilClose, false)
        );
        assert_eq!(framing(Method::GET, b"HTTP/1.1 200 OK\r\n\r\n").unwrap(), (UntilClose, false));
        assert_eq!(
            framing(Method::GET, b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\n\r\n").unwrap(),
            (Length(1), false)
        );
        assert_eq!(framing(Method::GET, b"HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\n").unwrap(), (Length(1), false));
        assert_eq!(
            framing(Method::GET, b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 1\r\n\r\n").unwrap(),
            (Length(1), true)
        );
        assert!(framing(Method::GET, b"HTTP/1.1 101 Switching Protocols\r\n\r\n").is_err());
        let (h, raw) = head(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n");
        assert_eq!(response_framing(&Method::GET, true, &h, &raw).unwrap(), (Upgrade, false));
    }
}
