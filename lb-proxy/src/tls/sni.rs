//! The server name of a TLS ClientHello, read with `peek` so every byte still reaches the
//! backend (TLS passthrough: the proxy never terminates these connections).
use std::time::Duration;

use tokio::net::TcpStream;

/// The largest ClientHello looked at (a TLS record holds at most 16 KiB of payload).
const MAX_HELLO: usize = 16 * 1024 + 5;

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ClientHelloError {
    /// The first bytes are no TLS handshake record with a ClientHello.
    NotTls,
    /// No complete ClientHello within the timeout (or the client closed).
    Timeout,
}

impl ClientHelloError {
    /// What the log says.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            ClientHelloError::NotTls => "not a TLS ClientHello",
            ClientHelloError::Timeout => "no complete ClientHello in time",
        }
    }
}

/// Waits for the ClientHello (at most `timeout`) and returns its server name, if it has one.
pub(crate) async fn read_server_name(
    stream: &TcpStream,
    timeout: Duration,
) -> Result<Option<String>, ClientHelloError> {
    let read = async {
        let mut buf = vec![0u8; MAX_HELLO];
        let mut seen = 0;
        loop {
            let n = stream.peek(&mut buf).await.map_err(|_| ClientHelloError::Timeout)?;
            if n == 0 {
                return Err(ClientHelloError::Timeout);
            }
            match parse(&buf[..n]) {
                Parsed::Done(name) => return Ok(name),
                Parsed::Invalid => return Err(ClientHelloError::NotTls),
                Parsed::NeedMore if n == buf.len() => return Err(ClientHelloError::NotTls),
                Parsed::NeedMore => {}
            }
            // peek returns at once while unread bytes wait: poll again after a moment, for
            // the rest of a ClientHello split over segments.
            if n == seen {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            seen = n;
        }
    };
    tokio::time::timeout(timeout, read).await.unwrap_or(Err(ClientHelloError::Timeout))
}

#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    Done(Option<String>),
    NeedMore,
    Invalid,
}

/// Parses TLS handshake records (RFC 8446 §5.1, §4.1.2) up to the end of the ClientHello.
fn parse(data: &[u8]) -> Parsed {
    // The handshake message may span records: join their payloads.
    let mut hs = Vec::new();
    let mut rest = data;
    loop {
        if rest.len() < 5 {
            return Parsed::NeedMore;
        }
        if rest[0] != 22 || rest[1] != 3 {
            return Parsed::Invalid;
        }
        let len = u16::from_be_bytes([rest[3], rest[4]]) as usize;
        if len == 0 || len > 16 * 1024 {
            return Parsed::Invalid;
        }
        if rest.len() < 5 + len {
            return Parsed::NeedMore;
        }
        hs.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
        if hs.len() >= 4 {
            if hs[0] != 1 {
                return Parsed::Invalid;
            }
            let body = u32::from_be_bytes([0, hs[1], hs[2], hs[3]]) as usize;
            if hs.len() >= 4 + body {
                return match server_name(&hs[4..4 + body]) {
                    Some(name) => Parsed::Done(name),
                    None => Parsed::Invalid,
                };
            }
        }
    }
}

/// The server name of a ClientHello body; None if the body is malformed.
fn server_name(hello: &[u8]) -> Option<Option<String>> {
    let mut r = Reader(hello);
    r.take(2 + 32)?; // legacy_version, random
    let sid = r.u8()? as usize;
    r.take(sid)?;
    let suites = r.u16()? as usize;
    r.take(suites)?;
    let compression = r.u8()? as usize;
    r.take(compression)?;
    if r.0.is_empty() {
        return Some(None); // no extensions
    }
    let ext_len = r.u16()? as usize;
    let mut exts = Reader(r.take(ext_len)?);
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let len = exts.u16()? as usize;
        let data = exts.take(len)?;
        if kind != 0 {
            continue;
        }
        let mut list = Reader(data);
        let list_len = list.u16()? as usize;
        let mut names = Reader(list.take(list_len)?);
        while !names.0.is_empty() {
            let name_type = names.u8()?;
            let n = names.u16()? as usize;
            let name = names.take(n)?;
            if name_type == 0 {
                let name = std::str::from_utf8(name).ok()?;
                return Some(Some(name.to_ascii_lowercase()));
            }
        }
    }
    Some(None)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
}

/// Whether `name` matches a route's `pattern` (exact, or `*.` for exactly one label).
pub(crate) fn name_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => {
            name.split_once('.').is_some_and(|(label, rest)| !label.is_empty() && rest.eq_ignore_ascii_case(suffix))
        }
        None => pattern.eq_ignore_ascii_case(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ClientHello record with `name` as SNI, split into records of `split` bytes.
    fn hello(name: Option<&str>, split: usize) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(0); // session id
        body.extend([0, 2, 0x13, 0x01]); // one suite
        body.extend([1, 0]); // null compression
        let mut exts = Vec::new();
        if let Some(n) = name {
            let mut sn = vec![0u8];
            sn.extend((n.len() as u16).to_be_bytes());
            sn.extend(n.as_bytes());
            let mut list = (sn.len() as u16).to_be_bytes().to_vec();
            list.extend(sn);
            exts.extend([0, 0]);
            exts.extend((list.len() as u16).to_be_bytes());
            exts.extend(list);
        }
        body.extend((exts.len() as u16).to_be_bytes());
        body.extend(exts);
        let mut hs = vec![1, 0, 0, 0];
        hs[1..4].copy_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend(body);
        let mut out = Vec::new();
        for chunk in hs.chunks(split) {
            out.extend([22, 3, 1]);
            out.extend((chunk.len() as u16).to_be_bytes());
            out.extend(chunk);
        }
        out
    }

    #[test]
    fn finds_the_name_in_one_or_several_records() {
        for split in [1000, 10, 1] {
            let h = hello(Some("Api.Example.org"), split);
            assert_eq!(parse(&h), Parsed::Done(Some("api.example.org".into())));
            assert_eq!(parse(&h[..h.len() - 1]), Parsed::NeedMore);
        }
        assert_eq!(parse(&hello(None, 1000)), Parsed::Done(None));
    }

    #[test]
    fn garbage_is_not_tls() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n\r\n"), Parsed::Invalid);
        assert_eq!(parse(&[22, 3, 1, 0, 4, 2, 0, 0, 0]), Parsed::Invalid);
    }

    #[test]
    fn wildcards_cover_one_label() {
        assert!(name_matches("*.example.org", "a.example.org"));
        assert!(!name_matches("*.example.org", "a.b.example.org"));
        assert!(!name_matches("*.example.org", "example.org"));
        assert!(name_matches("Example.org", "example.org"));
    }
}
