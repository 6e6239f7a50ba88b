//! Writing a response to an HTTP/1 client: the head (status line, the headers as they are, a
//! Date if the backend sent none, the framing the proxy chooses), then the body, by length when
//! it is known and chunked when not. The first body bytes go out with the head in one write.
use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::time::{SystemTime, UNIX_EPOCH};

use http::header::HeaderMap;
use http::{Response, StatusCode, Version};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::http::body::ProxyBody;
use crate::http::fields::{Fields, RawFields};
use crate::http::headers::{Present, hop_by_hop_name};

/// What the response must fit of its request.
pub(crate) struct Asked {
    pub(crate) head: bool,
    pub(crate) version: Version,
    /// The connection may carry another request after this one, as far as the client and the
    /// proxy are concerned.
    pub(crate) keep_alive: bool,
}

enum Framing {
    None,
    Length(u64),
    Chunked,
    /// HTTP/1.0 client, length unknown: the end of the connection ends the body.
    Close,
}

/// Writes `resp` whole. Ok(true): the connection may carry another request.
pub(crate) async fn write<W: AsyncWrite + Unpin>(
    w: &mut W,
    out: &mut Vec<u8>,
    resp: Response<ProxyBody>,
    asked: &Asked,
) -> io::Result<bool> {
    let (parts, mut body) = resp.into_parts();
    let status = parts.status;
    let switching = status == StatusCode::SWITCHING_PROTOCOLS;
    let bodiless = asked.head
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let present = Present::scan(&parts.headers);
    let dated = present.date || body.raw_fields().is_some_and(|f| f.present().date);
    let mut keep_alive = asked.keep_alive && !(present.connection && present.options.close);
    let framing = if bodiless {
        Framing::None
    } else if let Some(n) = body.size_hint().exact() {
        Framing::Length(n)
    } else if asked.version == Version::HTTP_11 {
        Framing::Chunked
    } else {
        keep_alive = false;
        Framing::Close
    };
    out.clear();
    // An HTTP/1.0 client is answered in its own version.
    out.extend_from_slice(if asked.version == Version::HTTP_10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>();
    out.extend_from_slice(reason.map_or(status.canonical_reason().unwrap_or("").as_bytes(), |r| r.as_bytes()));
    out.extend_from_slice(b"\r\n");
    write_fields(out, &parts.headers, body.raw_fields(), bodiless, switching);
    match framing {
        Framing::Length(n) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(itoa(n, &mut [0; 20]));
            out.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        Framing::None | Framing::Close => {}
    }
    if !dated {
        out.extend_from_slice(b"date: ");
        date(out);
        out.extend_from_slice(b"\r\n");
    }
    if !switching {
        if !keep_alive {
            out.extend_from_slice(b"connection: close\r\n");
        } else if asked.version == Version::HTTP_10 {
            out.extend_from_slice(b"connection: keep-alive\r\n");
        }
    }
    out.extend_from_slice(b"\r\n");
    if bodiless {
        write_parts(w, [out, &[], &[]]).await?;
        w.flush().await?;
        return Ok(keep_alive);
    }
    let chunked = matches!(framing, Framing::Chunked);
    let mut left = match framing {
        Framing::Length(n) => Some(n),
        _ => None,
    };
    loop {
        let frame = if body.is_end_stream() { None } else { body.frame().await };
        let data = match frame {
            None => {
                if chunked {
                    out.extend_from_slice(b"0\r\n\r\n");
                }
                write_parts(w, [out, &[], &[]]).await?;
                w.flush().await?;
                // A body shorter than its length leaves the client waiting for the rest.
                return Ok(keep_alive && left.unwrap_or(0) == 0);
            }
            Some(Err(e)) => {
                // The response breaks off: what was sent stays, and the client sees the
                // connection end before the body did.
                let _ = write_parts(w, [out, &[], &[]]).await;
                let _ = w.flush().await;
                return Err(io::Error::other(e));
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if !data.is_empty() => data,
                // Trailers are not forwarded: Trailer is hop-by-hop, so none was announced.
                _ => continue,
            },
        };
        let mut data = &data[..];
        if let Some(left) = &mut left {
            // Never more than the length said.
            data = &data[..data.len().min(*left as usize)];
            *left -= data.len() as u64;
        }
        let end = body.is_end_stream();
        let tail: &[u8] = match (chunked, end) {
            (false, _) => b"",
            (true, false) => b"\r\n",
            (true, true) => b"\r\n0\r\n\r\n",
        };
        if chunked {
            out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        }
        write_parts(w, [out, data, tail]).await?;
        out.clear();
        w.flush().await?;
        if end {
            return Ok(keep_alive && left.unwrap_or(0) == 0);
        }
    }
}

/// The response's own fields: a backend's as it sent them (less the hop-by-hop ones, names
/// lower-case), then those in the map. The framing fields are the proxy's to write, except
/// on a bodiless response (a HEAD's Content-Length tells the length of the GET); Connection
/// is the proxy's too, except on a 101, which names the upgrade in it.
fn write_fields(out: &mut Vec<u8>, headers: &HeaderMap, raw: Option<&RawFields>, bodiless: bool, switching: bool) {
    let mut field = |name: &[u8], value: &[u8]| {
        let framing = name == b"content-length" || name == b"transfer-encoding";
        if (framing && !bodiless) || (name == b"connection" && !switching) {
            return;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    // Two plain loops: chained and flattened, the iterators cost more than the writing.
    if let Some(raw) = raw {
        for (name, value) in raw.each() {
            if hop_by_hop_name(name).is_none() {
                field(name, value);
            }
        }
    }
    for (name, value) in headers.each() {
        field(name, value);
    }
}

/// Writes the three parts in as few system calls as the socket allows.
async fn write_parts<W: AsyncWrite + Unpin>(w: &mut W, mut parts: [&[u8]; 3]) -> io::Result<()> {
    loop {
        let slices = [IoSlice::new(parts[0]), IoSlice::new(parts[1]), IoSlice::new(parts[2])];
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total == 0 {
            return Ok(());
        }
        let mut n = w.write_vectored(&slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        for p in &mut parts {
            let used = n.min(p.len());
            *p = &p[used..];
            n -= used;
        }
    }
}

fn itoa(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

thread_local! {
    /// The Date value of the current second, made once a second per worker thread.
    static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// The Date field of the current second, for an h2 response that has none (hyper's own is
/// turned off: it looked the map up for Date on every response).
pub(crate) fn date_value() -> Option<http::HeaderValue> {
    let mut text = Vec::with_capacity(29);
    date(&mut text);
    http::HeaderValue::from_maybe_shared(bytes::Bytes::from(text)).ok()
}

fn date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(at, text)| {
        if *at != second {
            *at = second;
            *text = httpdate::fmt_http_date(now);
        }
        out.extend_from_slice(text.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    async fn written(resp: Response<ProxyBody>, asked: Asked) -> (String, bool) {
        let mut out = Vec::new();
        let mut wire = Vec::new();
        let keep = write(&mut wire, &mut out, resp, &asked).await.unwrap();
        let text = String::from_utf8(wire).unwrap();
        // The date changes; the rest is exact.
        let dated = text.lines().map(|l| if l.starts_with("date: ") { "date: D" } else { l }).collect::<Vec<_>>();
        (dated.join("\n"), keep)
    }

    fn asked(version: Version, keep_alive: bool) -> Asked {
        Asked { head: false, version, keep_alive }
    }

    #[tokio::test]
    async fn known_lengths_unknown_lengths_and_http_1_0() {
        let full = || Response::new(ProxyBody::full(Bytes::from_static(b"hello")));
        let (text, keep) = written(full(), asked(Version::HTTP_11, true)).await;
        assert_eq!(text, "HTTP/1.1 200 OK\ncontent-length: 5\ndate: D\n\nhello");
        assert!(keep);
        let (text, keep) = written(full(), asked(Version::HTTP_10, true)).await;
        assert_eq!(text, "HTTP/1.0 200 OK\ncontent-length: 5\ndate: D\nconnection: keep-alive\n\nhello");
        assert!(keep);
        let mut r = full();
        r.headers_mut().insert("connection", "close".parse().unwrap());
        *r.status_mut() = StatusCode::BAD_REQUEST;
        let (text, keep) = written(r, asked(Version::HTTP_11, true)).await;
        assert_eq!(text, "HTTP/1.1 400 Bad Request\ncontent-length: 5\ndate: D\nconnection: close\n\nhello");
        assert!(!keep);
        let mut head = asked(Version::HTTP_11, true);
        head.head = true;
        let mut r = full();
        r.headers_mut().insert("content-length", "99".parse().unwrap());
        let (text, _) = written(r, head).await;
        assert_eq!(
            text, "HTTP/1.1 200 OK\ncontent-length: 99\ndate: D\n",
            "a HEAD answer keeps its length, sends no body"
        );
    }
}
