//! A client's HTTP/1 request head (RFC 9112), parsed once, with its framing judged strictly:
//! anything a proxy and its backend could read two ways (Content-Length with
//! Transfer-Encoding, several or odd lengths, a coding other than a final chunked, line
//! folding) is refused, which is what keeps requests from being smuggled (§6.1, §6.3, §11.2).
use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::header;
use http::{Method, StatusCode, Uri, Version};

use crate::config::Limits;
use crate::http::conn::RequestLine;
use crate::http::fields::{self, Fields, RawRequest, text};
use crate::http::headers::{Present, persistent};

/// Header fields parsed on the stack; a limit above it is parsed with room on the heap.
const STACK_FIELDS: usize = 128;

/// How the request's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    None,
    Length(u64),
    Chunked,
}

pub(crate) struct Head {
    pub(crate) parts: RequestLine,
    pub(crate) fields: RawRequest,
    pub(crate) framing: Framing,
    /// The client lets the connection carry another request after this one.
    pub(crate) keep_alive: bool,
    /// `Expect: 100-continue` on a request with a body.
    pub(crate) expects_continue: bool,
}

/// Takes a complete request head off the front of `buf`: None while it is incomplete, the
/// status to answer (and close with) when it is not acceptable.
pub(crate) fn parse(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Head>, StatusCode> {
    let max_headers = limits.max_headers;
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_FIELDS];
    let mut heap = Vec::new();
    let slots: &mut [MaybeUninit<httparse::Header<'_>>] = if max_headers <= STACK_FIELDS {
        &mut stack[..max_headers]
    } else {
        heap.resize_with(max_headers, MaybeUninit::uninit);
        &mut heap
    };
    let (len, method, target, minor, ranges) = {
        let mut req = httparse::Request::new(&mut []);
        let len = match httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut req, buf, slots) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buf.len() > limits.max_header_bytes => {
                return Err(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
            Err(_) => return Err(StatusCode::BAD_REQUEST),
        };
        if len > limits.max_header_bytes {
            return Err(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        }
        // Byte ranges of each name and value, taken while `buf` is borrowed.
        let mut ranges = fields::spare_ranges();
        ranges.extend(req.headers.iter().map(|h| fields::range_of(buf, h)));
        let method =
            Method::from_bytes(req.method.unwrap_or_default().as_bytes()).map_err(|_| StatusCode::BAD_REQUEST)?;
        let path = req.path.unwrap_or_default();
        let at = fields::offset(buf, path.as_bytes()) as usize;
        (len, method, [at, at + path.len()], req.version.unwrap_or(1), ranges)
    };
    // Names lower-cased in place (httparse accepted only token characters, which `http`'s
    // names are too), and the framing and reuse fields noted on the way.
    let mut present = Present::default();
    for &[a, b, c, d] in &ranges {
        buf[a as usize..b as usize].make_ascii_lowercase();
        present.note_request(&buf[a as usize..b as usize], &buf[c as usize..d as usize]);
    }
    let head = buf.split_to(len).freeze();
    let uri = Uri::from_maybe_shared(head.slice(target[0]..target[1])).map_err(|_| StatusCode::BAD_REQUEST)?;
    let fields = RawRequest::new(head, ranges, present);
    let version = if minor == 0 { Version::HTTP_10 } else { Version::HTTP_11 };
    let framing = framing(&fields, version, present)?;
    let keep_alive = persistent(version, present);
    let expects_continue = version == Version::HTTP_11
        && framing != Framing::None
        && present.expect
        && fields.first(&header::EXPECT).is_some_and(|v| v.eq_ignore_ascii_case(b"100-continue"));
    let parts = RequestLine { method, uri, version };
    Ok(Some(Head { parts, fields, framing, keep_alive, expects_continue }))
}

/// The body's framing, or 400 for anything ambiguous.
fn framing(headers: &impl Fields, version: Version, present: Present) -> Result<Framing, StatusCode> {
    let bad = StatusCode::BAD_REQUEST;
    if present.transfer_encoding {
        // Transfer-Encoding with Content-Length, or in HTTP/1.0, is refused (§6.1, §6.3).
        if version != Version::HTTP_11 || present.content_length {
            return Err(bad);
        }
        let codings = headers.values(&header::TRANSFER_ENCODING);
        let mut chunked_last = false;
        for coding in codings.map(|v| text(v).ok_or(bad)).flat_map(|v| match v {
            Ok(v) => v.split(',').map(Ok).collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        }) {
            let coding = coding?.trim();
            // Chunked applied twice, or anything after it, leaves the length unknown.
            if chunked_last || coding.is_empty() {
                return Err(bad);
            }
            chunked_last = coding.eq_ignore_ascii_case("chunked");
        }
        return if chunked_last { Ok(Framing::Chunked) } else { Err(bad) };
    }
    if !present.content_length {
        return Ok(Framing::None);
    }
    let mut lengths = headers.values(&header::CONTENT_LENGTH);
    let Some(length) = lengths.next() else {
        return Ok(Framing::None);
    };
    // One plain decimal number: repeated fields, lists and signs are refused.
    let digits = length;
    if lengths.next().is_some() || digits.len() > 19 {
        return Err(bad);
    }
    let n = fields::decimal(digits).ok_or(bad)?;
    Ok(if n == 0 { Framing::None } else { Framing::Length(n) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits { max_headers: 20, max_header_bytes: 1024, ..Limits::default() }
    }

    fn head(raw: &str) -> Result<Option<Head>, StatusCode> {
        parse(&mut BytesMut::from(raw.as_bytes()), &limits())
    }

    fn framing_of(raw: &str) -> Result<Framing, StatusCode> {
        head(raw).map(|h| h.expect("complete").framing)
    }

    #[test]
    fn heads_parse_once_and_leave_what_follows() {
        let mut buf = BytesMut::from(&b"GET /a?b HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nx-a: 2\r\n\r\nGET /next"[..]);
        let h = parse(&mut buf, &limits()).unwrap().unwrap();
        assert_eq!(
            (h.parts.method, h.parts.uri.to_string(), h.parts.version),
            (Method::GET, "/a?b".into(), Version::HTTP_11)
        );
        let x_a = http::HeaderName::from_static("x-a");
        assert_eq!(h.fields.values(&x_a).collect::<Vec<_>>(), [b"1", b"2"], "names lower-cased");
        assert_eq!((h.framing, h.keep_alive, h.expects_continue), (Framing::None, true, false));
        assert_eq!(&buf[..], b"GET /next");
        assert!(parse(&mut buf, &limits()).unwrap().is_none(), "incomplete");
        let h = head("GET http://example.org:8/p HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert_eq!((h.parts.uri.authority().unwrap().as_str(), h.keep_alive), ("example.org:8", false));
        let h = head("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").unwrap().unwrap();
        assert!(h.keep_alive);
        let h =
            head("POST / HTTP/1.1\r\nConnection: close\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n").unwrap();
        let h = h.unwrap();
        assert_eq!((h.keep_alive, h.expects_continue, h.framing), (false, true, Framing::Length(1)));
    }

    #[test]
    fn framing_is_judged_strictly() {
        assert_eq!(framing_of("POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\n"), Ok(Framing::Length(12)));
        assert_eq!(framing_of("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), Ok(Framing::None));
        assert_eq!(framing_of("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), Ok(Framing::Chunked));
        assert_eq!(framing_of("POST / HTTP/1.1\r\nTransfer-Encoding: CHUNKED\r\n\r\n"), Ok(Framing::Chunked));
        for bad in [
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert_eq!(framing_of(bad).err(), Some(StatusCode::BAD_REQUEST), "{bad:?}");
        }
    }

    #[test]
    fn syntax_and_limits() {
        let status = |raw: &str| head(raw).err();
        assert_eq!(status("POST / HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n"), Some(StatusCode::BAD_REQUEST));
        assert_eq!(status("POST / HTTP/1.1\r\nContent-Length : 5\r\n\r\n"), Some(StatusCode::BAD_REQUEST));
        assert_eq!(status("GET / HTTP/2.0\r\n\r\n"), Some(StatusCode::BAD_REQUEST));
        let many: String = (0..21).map(|i| format!("X-H{i}: v\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\n{many}\r\n")), Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE));
        let big = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n", "a".repeat(2000));
        assert_eq!(status(&big), Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE), "even before its end");
        // Bare LF line ends are accepted (§2.2).
        assert_eq!(framing_of("POST / HTTP/1.1\nContent-Length: 2\n\n"), Ok(Framing::Length(2)));
    }
}
