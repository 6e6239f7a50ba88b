//! HTTP/1.1 message bodies as they arrive in a read buffer: by length, chunked (RFC 9112 §7.1),
//! or until the peer closes. One decoder for both sides: requests from clients, responses from
//! backends.
use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};
use http_body::{Frame, SizeHint};

/// Longest chunk-size or trailer line accepted.
const MAX_LINE: usize = 4096;
/// Most trailer bytes accepted.
const MAX_TRAILERS: usize = 16 * 1024;

pub(crate) enum Decoder {
    Length(u64),
    ChunkSize,
    ChunkData(u64),
    ChunkEnd,
    /// Trailer fields so far (boxed: most chunked bodies have none), and their size.
    Trailers(Option<Box<HeaderMap>>, usize),
    UntilClose,
    /// Read whole.
    Done,
}

/// One step of decoding.
pub(crate) enum Step {
    Frame(Frame<Bytes>),
    End,
    /// More bytes must be read first.
    More,
    Malformed(&'static str),
}

impl Decoder {
    pub(crate) fn length(n: u64) -> Self {
        if n == 0 { Decoder::Done } else { Decoder::Length(n) }
    }

    pub(crate) fn chunked() -> Self {
        Decoder::ChunkSize
    }

    pub(crate) fn is_done(&self) -> bool {
        matches!(self, Decoder::Done)
    }

    /// The exact length still to come, when the framing says it.
    pub(crate) fn exact(&self) -> Option<u64> {
        match self {
            Decoder::Length(n) => Some(*n),
            Decoder::Done => Some(0),
            _ => None,
        }
    }

    /// The body's size hint for what is still to come.
    pub(crate) fn size_hint(&self) -> SizeHint {
        match self.exact() {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }

    /// Decodes from the front of `buf`.
    pub(crate) fn step(&mut self, buf: &mut BytesMut) -> Step {
        loop {
            match self {
                Decoder::Done => return Step::End,
                Decoder::Length(left) | Decoder::ChunkData(left) => {
                    if buf.is_empty() {
                        return Step::More;
                    }
                    let n = (*left).min(buf.len() as u64) as usize;
                    *left -= n as u64;
                    // Shared with the read buffer, not copied: the buffer reads on into its
                    // free tail and takes its allocation back once the frame is written.
                    let data = buf.split_to(n).freeze();
                    if *left == 0 {
                        *self = if matches!(self, Decoder::Length(_)) { Decoder::Done } else { Decoder::ChunkEnd };
                    }
                    return Step::Frame(Frame::data(data));
                }
                Decoder::UntilClose => {
                    if buf.is_empty() {
                        return Step::More;
                    }
                    return Step::Frame(Frame::data(buf.split().freeze()));
                }
                Decoder::ChunkSize => {
                    let line = match take_line(buf) {
                        Ok(Some(line)) => line,
                        Ok(None) => return Step::More,
                        Err(e) => return Step::Malformed(e),
                    };
                    match chunk_size(&line) {
                        Ok(0) => *self = Decoder::Trailers(None, 0),
                        Ok(n) => *self = Decoder::ChunkData(n),
                        Err(e) => return Step::Malformed(e),
                    }
                }
                Decoder::ChunkEnd => {
                    if buf.len() < 2 {
                        return Step::More;
                    }
                    if &buf[..2] != b"\r\n" {
                        return Step::Malformed("chunk not followed by CRLF");
                    }
                    buf.advance(2);
                    *self = Decoder::ChunkSize;
                }
                Decoder::Trailers(trailers, size) => {
                    let line = match take_line(buf) {
                        Ok(Some(line)) => line,
                        Ok(None) => return Step::More,
                        Err(e) => return Step::Malformed(e),
                    };
                    if line.is_empty() {
                        let trailers = trailers.take();
                        *self = Decoder::Done;
                        return match trailers {
                            Some(t) => Step::Frame(Frame::trailers(*t)),
                            None => Step::End,
                        };
                    }
                    *size += line.len();
                    if *size > MAX_TRAILERS {
                        return Step::Malformed("trailers too large");
                    }
                    match trailer(&line) {
                        Ok((name, value)) => {
                            trailers.get_or_insert_default().append(name, value);
                        }
                        Err(e) => return Step::Malformed(e),
                    }
                }
            }
        }
    }
}

/// Takes one CRLF-terminated line off the front of `buf` (without the CRLF).
fn take_line(buf: &mut BytesMut) -> Result<Option<Bytes>, &'static str> {
    match buf.windows(2).position(|w| w == b"\r\n") {
        Some(end) => {
            let line = buf.split_to(end).freeze();
            buf.advance(2);
            Ok(Some(line))
        }
        None if buf.len() > MAX_LINE => Err("chunk line too long"),
        None => Ok(None),
    }
}

/// A chunk-size line: hex digits, then optional extensions (ignored).
fn chunk_size(line: &[u8]) -> Result<u64, &'static str> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    let rest = &line[digits..];
    let rest_ok = rest.is_empty() || matches!(rest.iter().find(|b| !matches!(b, b' ' | b'\t')), None | Some(b';'));
    if digits == 0 || digits > 15 || !rest_ok {
        return Err("chunk size");
    }
    let text = std::str::from_utf8(&line[..digits]).map_err(|_| "chunk size")?;
    u64::from_str_radix(text, 16).map_err(|_| "chunk size")
}

fn trailer(line: &Bytes) -> Result<(HeaderName, HeaderValue), &'static str> {
    let colon = line.iter().position(|&b| b == b':').ok_or("trailer")?;
    let name = HeaderName::from_bytes(&line[..colon]).map_err(|_| "trailer name")?;
    let value = line.slice(colon + 1..);
    let start = value.iter().position(|b| !matches!(b, b' ' | b'\t')).unwrap_or(value.len());
    let end = value.iter().rposition(|b| !matches!(b, b' ' | b'\t')).map_or(start, |e| e + 1);
    let value = HeaderValue::from_maybe_shared(value.slice(start..end.max(start))).map_err(|_| "trailer value")?;
    Ok((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `wire` fed in pieces of `piece` bytes: the data, the trailers, and whether it ended.
    fn decode(mut d: Decoder, wire: &[u8], piece: usize) -> Result<(Vec<u8>, Option<HeaderMap>, bool), &'static str> {
        let (mut data, mut trailers, mut buf) = (Vec::new(), None, BytesMut::new());
        let mut input = wire.chunks(piece);
        loop {
            match d.step(&mut buf) {
                Step::Frame(f) => match f.into_data() {
                    Ok(b) => data.extend_from_slice(&b),
                    Err(f) => trailers = f.into_trailers().ok(),
                },
                Step::End => return Ok((data, trailers, true)),
                Step::More => match input.next() {
                    Some(p) => buf.extend_from_slice(p),
                    None => return Ok((data, trailers, false)),
                },
                Step::Malformed(e) => return Err(e),
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_in_any_pieces() {
        let wire = b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nx-sum: 1\r\n\r\n";
        for piece in [1, 2, 7, wire.len()] {
            let (data, trailers, ended) = decode(Decoder::chunked(), wire, piece).unwrap();
            assert_eq!((&data[..], ended), (&b"hello world"[..], true), "pieces of {piece}");
            assert_eq!(trailers.unwrap()["x-sum"], "1");
        }
        let (data, trailers, ended) = decode(Decoder::chunked(), b"3\r\nabc\r\n0\r\n\r\n", 4).unwrap();
        assert_eq!((&data[..], trailers.is_none(), ended), (&b"abc"[..], true, true));
        assert!(decode(Decoder::chunked(), b"3\r\nabcX\r\n", 100).is_err(), "data longer than its size");
        assert!(decode(Decoder::chunked(), b"zz\r\n", 100).is_err());
    }

    #[test]
    fn lengths_stop_at_their_end() {
        let (data, _, ended) = decode(Decoder::length(3), b"abcdef", 2).unwrap();
        assert_eq!((&data[..], ended), (&b"abc"[..], true));
        let (data, _, ended) = decode(Decoder::length(10), b"abc", 1).unwrap();
        assert_eq!((&data[..], ended), (&b"abc"[..], false));
        assert!(Decoder::length(0).is_done());
    }

    #[test]
    fn chunk_size_lines() {
        assert_eq!(chunk_size(b"1a").unwrap(), 26);
        assert_eq!(chunk_size(b"0").unwrap(), 0);
        assert_eq!(chunk_size(b"A;name=value").unwrap(), 10);
        assert_eq!(chunk_size(b"a ;x").unwrap(), 10);
        for bad in [&b""[..], b"g", b"-1", b"1x", b"0x10", b"1111111111111111"] {
            assert!(chunk_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn trailer_lines() {
        let (n, v) = trailer(&Bytes::from_static(b"X-Sum:  abc \t")).unwrap();
        assert_eq!((n.as_str(), v.to_str().unwrap()), ("x-sum", "abc"));
        assert!(trailer(&Bytes::from_static(b"no colon")).is_err());
        assert!(trailer(&Bytes::from_static(b"bad name: 1")).is_err());
    }
}
