//! Header rewriting between client and backend: hop-by-hop headers removed (RFC 9110 §7.6.1),
//! client information added (X-Forwarded-*, RFC 7239 `Forwarded`), h2 requests turned into
//! HTTP/1.1 ones.
use std::net::{IpAddr, SocketAddr};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Uri, Version, response};

use super::conn::RequestLine;
use super::fields::{EditFields, Fields, text};
use crate::config::ForwardedHeaders;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Whether an HTTP/1.1 request asks to switch protocols (WebSocket and the like).
pub(crate) fn is_upgrade(version: Version, headers: &impl Fields) -> bool {
    let hint = headers.hint();
    version == Version::HTTP_11
        && hint.is_none_or(|p| p.upgrade)
        && headers.has(&header::UPGRADE)
        && connection_options(headers, hint).upgrade
}

/// Which of the fields that decide a message's framing and its connection's reuse a head
/// carries. One pass over the names (a few compares each) costs less than one lookup, and most
/// heads carry none of these but a length: absent ones then need no lookup at all.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Present {
    pub(crate) connection: bool,
    pub(crate) transfer_encoding: bool,
    pub(crate) content_length: bool,
    pub(crate) expect: bool,
    pub(crate) date: bool,
    /// Noted for requests only (`note_request`): any hop-by-hop field, Upgrade, any of the
    /// client-information fields, and how many Host fields (up to 2: one too many is all that
    /// matters).
    pub(crate) hop_by_hop: bool,
    pub(crate) upgrade: bool,
    pub(crate) forwarded: bool,
    pub(crate) hosts: u8,
    /// The options the Connection fields carry, read as they are noted (or scanned): none
    /// while `connection` is false.
    pub(crate) options: ConnectionOptions,
}

/// The options of a head's Connection fields (RFC 9110 §7.6.1), read in one pass: the reuse
/// rules, the upgrade check and the hop-by-hop removal each asked for them with a pass of
/// their own over the fields and the values, and a client that wants one request per
/// connection sends `Connection: close` with every request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ConnectionOptions {
    pub(crate) close: bool,
    pub(crate) keep_alive: bool,
    pub(crate) upgrade: bool,
    /// An option other than "close" and "keep-alive" ("upgrade" included), or a value that is
    /// not text (which may name anything): the fields it names are to be removed.
    pub(crate) names_others: bool,
}

impl ConnectionOptions {
    /// The options of every value in `values` (the Connection fields of one head).
    pub(crate) fn of<'a>(values: impl Iterator<Item = &'a [u8]>) -> ConnectionOptions {
        let mut o = ConnectionOptions::default();
        values.for_each(|v| o.add(v));
        o
    }

    /// Adds the options of one Connection field's value.
    pub(crate) fn add(&mut self, value: &[u8]) {
        // The common values, whole.
        if value.eq_ignore_ascii_case(b"close") {
            self.close = true;
            return;
        }
        if value.eq_ignore_ascii_case(b"keep-alive") {
            self.keep_alive = true;
            return;
        }
        if text(value).is_none() {
            self.names_others = true;
            return;
        }
        // Text is visible ASCII, spaces and tabs: trimmed as bytes as `str::trim` would.
        for option in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
            if option.is_empty() {
                continue;
            }
            if option.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if option.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else {
                self.upgrade |= option.eq_ignore_ascii_case(b"upgrade");
                self.names_others = true;
            }
        }
    }
}

impl Present {
    /// From a map: its names compare as the standard names they are, no bytes compared.
    pub(crate) fn scan(headers: &HeaderMap) -> Present {
        let mut p = Present::default();
        for name in headers.keys() {
            if *name == header::CONNECTION {
                p.connection = true;
            } else if *name == header::TRANSFER_ENCODING {
                p.transfer_encoding = true;
            } else if *name == header::CONTENT_LENGTH {
                p.content_length = true;
            } else if *name == header::EXPECT {
                p.expect = true;
            } else if *name == header::DATE {
                p.date = true;
            }
        }
        if p.connection {
            p.options = ConnectionOptions::of(headers.get_all(header::CONNECTION).iter().map(HeaderValue::as_bytes));
        }
        p
    }

    /// Notes a field, its name lower-case: by the name's length first, so most names cost one
    /// compare of lengths and none of bytes; a Connection field's options are read from
    /// `value` on the way.
    pub(crate) fn note(&mut self, name: &[u8], value: &[u8]) {
        match name.len() {
            4 => self.date |= name == b"date",
            6 => self.expect |= name == b"expect",
            10 if name == b"connection" => {
                self.connection = true;
                self.options.add(value);
            }
            14 => self.content_length |= name == b"content-length",
            17 => self.transfer_encoding |= name == b"transfer-encoding",
            _ => {}
        }
    }

    /// Notes a request field, its name lower-case: as `note` does, and whether it is
    /// hop-by-hop (Upgrade noted apart) or a client-information field. Most requests carry
    /// none of those, and then their removal needs no pass over the fields.
    pub(crate) fn note_request(&mut self, name: &[u8], value: &[u8]) {
        self.note(name, value);
        match hop_by_hop_name(name) {
            Some(i) => {
                self.hop_by_hop = true;
                self.upgrade |= i == 1;
            }
            None if name == b"host" => self.hosts = (self.hosts + 1).min(2),
            None => self.forwarded |= is_forwarded(name),
        }
    }
}

/// Whether a message lets its connection carry another one after it (RFC 9112 §9.3):
/// HTTP/1.1 unless it says `close`, HTTP/1.0 only if it says `keep-alive`. `present` is its
/// head's, its Connection options read.
pub(crate) fn persistent(version: Version, present: Present) -> bool {
    let options = present.options;
    match version {
        Version::HTTP_11 => !(present.connection && options.close),
        _ => present.connection && options.keep_alive,
    }
}

/// The options of `headers`' Connection fields: as noted with the fields (`hint`, theirs), or
/// read from them now when they note none.
fn connection_options(headers: &impl Fields, hint: Option<Present>) -> ConnectionOptions {
    match hint {
        Some(p) if p.connection => p.options,
        Some(_) => ConnectionOptions::default(),
        None => ConnectionOptions::of(headers.values(&header::CONNECTION)),
    }
}

/// Removes hop-by-hop headers, including those the Connection header names. An upgrade keeps
/// `Connection: upgrade` and `Upgrade`: they are what the backend must see.
pub(crate) fn remove_hop_by_hop(headers: &mut impl EditFields, upgrade: bool) {
    let hint = headers.hint();
    // Most heads carry no hop-by-hop field, and `Connection: close` alone is the common case
    // of those that do. Fields that note their names know it without a pass; a map is
    // searched once (its removal of none would still allocate).
    if !upgrade
        && match hint {
            Some(p) => !p.hop_by_hop,
            None => !headers.each().any(|(name, _)| hop_by_hop_name(name).is_some()),
        }
    {
        return;
    }
    // Connection options that name no other header ("close", "keep-alive") need no lookups.
    if upgrade || connection_options(headers, hint).names_others {
        // The headers the Connection options name, copied so that they can be read while the
        // fields change (a value that is not text names none).
        let options: Vec<String> = headers
            .values(&header::CONNECTION)
            .filter_map(text)
            .flat_map(|s| s.split(','))
            .map(|o| o.trim().to_string())
            .collect();
        for option in &options {
            // Host is end-to-end whatever Connection says: a backend needs it (RFC 9112 §3.2).
            let keep = option.eq_ignore_ascii_case("host") || (upgrade && option.eq_ignore_ascii_case("upgrade"));
            if !keep && !option.is_empty() {
                headers.remove_named(option);
            }
        }
    }
    // The fixed names in one pass; an upgrade keeps Connection and Upgrade (the first two).
    headers.retain_names(|name| hop_by_hop_name(name).is_none_or(|i| upgrade && i < 2));
    if upgrade {
        headers.set(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// The fixed hop-by-hop headers, and Connection and Upgrade, in `hop_by_hop_name`'s order.
#[cfg(test)]
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    header::UPGRADE,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
];

/// Where a lower-case field name is in `HOP_BY_HOP`. One match on the name: searching the
/// array built it anew for every field of every head, and dropped it again (callgrind: about
/// 0.4k instructions a request); a static array compared name by name costs more still.
pub(crate) fn hop_by_hop_name(name: &[u8]) -> Option<usize> {
    Some(match name {
        b"connection" => 0,
        b"upgrade" => 1,
        b"keep-alive" => 2,
        b"proxy-connection" => 3,
        b"te" => 4,
        b"trailer" => 5,
        b"transfer-encoding" => 6,
        b"proxy-authenticate" => 7,
        b"proxy-authorization" => 8,
        _ => return None,
    })
}

/// Turns a client request head (`parts`, and its fields) into the one sent to a backend
/// (always HTTP/1.1, origin-form). `proto` is the scheme the client used (`http` or `https`).
pub(crate) fn prepare_request(
    parts: &mut RequestLine,
    fields: &mut impl EditFields,
    client: SocketAddr,
    opts: &ForwardedHeaders,
    upgrade: bool,
    proto: &'static str,
) {
    // An absolute-form target's authority replaces Host (RFC 9112 §3.2.2); h2 carries the
    // host in :authority. Either way the HTTP/1.1 backend gets it as Host.
    if let Some(v) = parts.uri.authority().and_then(|a| HeaderValue::from_str(a.as_str()).ok()) {
        fields.set(header::HOST, v);
    }
    if parts.uri.scheme().is_some() || parts.uri.authority().is_some() {
        // The target's path and query kept as parsed (their bytes shared, not parsed again);
        // none, or an empty one, is "/".
        let mut target = std::mem::take(&mut parts.uri).into_parts();
        target.scheme = None;
        target.authority = None;
        target.path_and_query = target.path_and_query.filter(|p| !p.as_str().is_empty());
        parts.uri = match target.path_and_query {
            Some(_) => Uri::from_parts(target).unwrap_or_else(|_| Uri::from_static("/")),
            None => Uri::from_static("/"),
        };
    }
    parts.version = Version::HTTP_11;
    remove_hop_by_hop(fields, upgrade);
    add_forwarded(fields, client.ip(), opts, proto);
}

/// The host a request is for, without its port: an absolute-form target's or h2's authority,
/// else the Host field (which `prepare_request` fills from the authority).
pub(crate) fn request_host<'a>(uri: &'a Uri, headers: &'a impl Fields) -> Option<&'a str> {
    match uri.authority() {
        Some(a) => Some(a.host()),
        None => headers.first(&header::HOST).and_then(text).map(host_without_port),
    }
}

/// `example.org:8080` → `example.org`; `[2001:db8::1]:80` → `[2001:db8::1]`.
fn host_without_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
    }
}

/// Every line of a (list-valued) header joined in order, as one value (RFC 9110 §5.3).
fn joined(headers: &impl Fields, name: &HeaderName) -> Option<String> {
    let mut out: Option<String> = None;
    for v in headers.values(name) {
        let v = text(v)?.trim();
        match &mut out {
            Some(o) => {
                o.push_str(", ");
                o.push_str(v);
            }
            None => out = Some(v.to_string()),
        }
    }
    out
}

/// Whether `name` is one of the client-information fields (one match: see `hop_by_hop_index`).
fn is_forwarded(name: &[u8]) -> bool {
    matches!(name, b"x-forwarded-for" | b"x-forwarded-proto" | b"x-forwarded-host" | b"forwarded")
}

fn add_forwarded(headers: &mut impl EditFields, client: IpAddr, opts: &ForwardedHeaders, proto: &'static str) {
    if !opts.trust_incoming
        && headers.hint().is_none_or(|p| p.forwarded)
        && headers.each().any(|(n, _)| is_forwarded(n))
    {
        for n in [X_FORWARDED_FOR, X_FORWARDED_PROTO, X_FORWARDED_HOST, header::FORWARDED] {
            headers.remove(&n);
        }
    }
    if !opts.x_forwarded && !opts.forwarded {
        return;
    }
    let host = headers.first_owned(&header::HOST);
    if opts.x_forwarded {
        let ip = client.to_string();
        let xff = match joined(headers, &X_FORWARDED_FOR) {
            Some(prev) => format!("{prev}, {ip}"),
            None => ip,
        };
        if let Ok(v) = HeaderValue::from_str(&xff) {
            headers.set(X_FORWARDED_FOR, v);
        }
        if !headers.has(&X_FORWARDED_PROTO) {
            headers.set(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
        }
        if let (false, Some(h)) = (headers.has(&X_FORWARDED_HOST), &host) {
            headers.set(X_FORWARDED_HOST, h.clone());
        }
    }
    if opts.forwarded {
        let mut elem = match client {
            IpAddr::V4(v4) => format!("for={v4}"),
            // IPv6 nodes are bracketed and quoted (RFC 7239 §6).
            IpAddr::V6(v6) => format!("for=\"[{v6}]\""),
        };
        if let Some(h) = host.as_ref().and_then(|h| h.to_str().ok()) {
            if h.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b)) {
                elem.push_str(";host=");
                elem.push_str(h);
            } else {
                elem.push_str(&format!(";host={h:?}"));
            }
        }
        elem.push_str(";proto=");
        elem.push_str(proto);
        let value = match joined(headers, &header::FORWARDED) {
            Some(prev) => format!("{prev}, {elem}"),
            None => elem,
        };
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.set(header::FORWARDED, v);
        }
    }
}

/// Turns a backend response head into the one sent to the client.
pub(crate) fn prepare_response(parts: &mut response::Parts, upgrade: bool) {
    remove_hop_by_hop(&mut parts.headers, upgrade);
}

/// The value of cookie `name` in the request's Cookie headers.
pub(crate) fn cookie<'a>(headers: &'a impl Fields, name: &str) -> Option<&'a str> {
    headers
        .values(&header::COOKIE)
        .filter_map(text)
        .flat_map(|s| s.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hop_by_hop_match_finds_each_name_at_its_place() {
        for (i, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop_name(name.as_str().as_bytes()), Some(i), "{name}");
        }
        assert_eq!(hop_by_hop_name(b"host"), None);
        for name in [X_FORWARDED_FOR, X_FORWARDED_PROTO, X_FORWARDED_HOST, header::FORWARDED] {
            assert!(is_forwarded(name.as_str().as_bytes()), "{name}");
        }
        assert!(!is_forwarded(b"host"));
    }

    #[test]
    fn present_notes_the_framing_names_and_only_them() {
        let mut p = Present::default();
        for name in ["dat", "data", "expects", "connectiox", "content-lengtx", "transfer-encodinx", "x-date"] {
            p.note(name.as_bytes(), b"close");
        }
        assert!(!(p.date || p.expect || p.connection || p.content_length || p.transfer_encoding), "{p:?}");
        assert_eq!(p.options, ConnectionOptions::default(), "only a Connection field's options");
        for name in ["date", "expect", "connection", "content-length", "transfer-encoding"] {
            p.note(name.as_bytes(), b"close");
        }
        assert!(p.date && p.expect && p.connection && p.content_length && p.transfer_encoding, "{p:?}");
        assert!(p.options.close && !p.options.names_others);
    }

    #[test]
    fn connection_options_are_read_as_tokens() {
        let of = |values: &[&[u8]]| ConnectionOptions::of(values.iter().copied());
        let o = of(&[b"Close"]);
        assert!(o.close && !o.keep_alive && !o.upgrade && !o.names_others, "{o:?}");
        let o = of(&[b" keep-alive ,\tclose", b""]);
        assert!(o.close && o.keep_alive && !o.names_others, "{o:?}");
        let o = of(&[b"close", b"UPGRADE"]);
        assert!(o.close && o.upgrade && o.names_others, "{o:?}");
        assert!(!of(&[b"closed, xclose"]).close);
        assert!(of(&[b"x-secret"]).names_others);
        assert!(of(&[b"close\xff"]).names_others, "not text: may name anything");
        assert!(!of(&[b", ,"]).names_others);
    }

    #[test]
    fn raw_request_options_follow_its_connection_fields() {
        let options = |r: &crate::http::fields::RawRequest| r.hint().unwrap().options;
        let mut r = crate::http::fields::RawRequest::from_wire(b"GET / HTTP/1.1\r\nConnection: close, x-a\r\n\r\n");
        assert!(options(&r).close && options(&r).names_others);
        assert!(!persistent(Version::HTTP_11, r.hint().unwrap()));
        r.remove(&header::CONNECTION);
        assert_eq!(options(&r), ConnectionOptions::default());
        assert!(persistent(Version::HTTP_11, r.hint().unwrap()));
        r.set(header::CONNECTION, HeaderValue::from_static("upgrade"));
        assert!(options(&r).upgrade && !options(&r).close);
        r.retain_names(|n| hop_by_hop_name(n).is_none());
        assert!(!r.hint().unwrap().connection && !options(&r).upgrade);
        let r = crate::http::fields::RawRequest::from_wire(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(persistent(Version::HTTP_10, r.hint().unwrap()));
    }

    #[test]
    fn raw_request_host_count_follows_its_host_fields() {
        let hosts = |r: &crate::http::fields::RawRequest| r.hint().unwrap().hosts;
        let mut r = crate::http::fields::RawRequest::from_wire(b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\nHOST: b\r\n\r\n");
        assert_eq!(hosts(&r), 2);
        r.remove(&header::HOST);
        assert_eq!(hosts(&r), 0);
        r.set(header::HOST, HeaderValue::from_static("c"));
        assert_eq!(hosts(&r), 1);
        r.retain_names(|n| n != b"host");
        assert_eq!(hosts(&r), 0);
        let r = crate::http::fields::RawRequest::from_wire(b"GET / HTTP/1.1\r\nX: 1\r\n\r\n");
        assert_eq!(hosts(&r), 0);
    }

    fn parts(req: http::Request<()>) -> http::request::Parts {
        req.into_parts().0
    }

    fn sorted_lines(fields: &impl Fields) -> Vec<String> {
        let mut lines: Vec<String> = fields
            .each()
            .map(|(n, v)| format!("{}: {}", String::from_utf8_lossy(n), String::from_utf8_lossy(v)))
            .collect();
        lines.sort();
        lines
    }

    /// `prepare_request` on `p`'s fields both as an h2 request's map and as an HTTP/1
    /// request's ranges: the two must come out with the same fields (the map's returned).
    fn prepare(p: &mut http::request::Parts, client: &str, opts: &ForwardedHeaders, upgrade: bool) {
        let mut wire = String::from("GET / HTTP/1.1\r\n");
        for (n, v) in &p.headers {
            wire.push_str(&format!("{}: {}\r\n", n.as_str().to_ascii_uppercase(), v.to_str().unwrap()));
        }
        wire.push_str("\r\n");
        let mut raw = crate::http::fields::RawRequest::from_wire(wire.as_bytes());
        let client = client.parse().unwrap();
        let line = || RequestLine { method: p.method.clone(), uri: p.uri.clone(), version: p.version };
        let (mut raw_line, mut map_line) = (line(), line());
        prepare_request(&mut raw_line, &mut raw, client, opts, upgrade, "http");
        let mut map = std::mem::take(&mut p.headers);
        prepare_request(&mut map_line, &mut map, client, opts, upgrade, "http");
        assert_eq!(sorted_lines(&raw), sorted_lines(&map), "ranges and map agree");
        assert_eq!((&raw_line.uri, raw_line.version), (&map_line.uri, map_line.version));
        (p.uri, p.version, p.headers) = (map_line.uri, map_line.version, map);
    }

    #[test]
    fn hop_by_hop_and_connection_named_headers_are_removed() {
        let mut p = parts(
            http::Request::get("/x")
                .header("connection", "keep-alive, x-secret")
                .header("keep-alive", "timeout=5")
                .header("x-secret", "1")
                .header("te", "trailers")
                .header("proxy-authorization", "Basic x")
                .header("upgrade", "h2c")
                .header("x-kept", "yes")
                .body(())
                .unwrap(),
        );
        prepare(&mut p, "192.0.2.7:9", &ForwardedHeaders::default(), false);
        for gone in ["connection", "keep-alive", "x-secret", "te", "proxy-authorization", "upgrade"] {
            assert!(!p.headers.contains_key(gone), "{gone} must be removed");
        }
        assert_eq!(p.headers["x-kept"], "yes");
    }

    #[test]
    fn connection_options_that_name_no_header_present_or_no_valid_name_change_nothing_else() {
        let mut p = parts(
            http::Request::get("/x")
                .header("host", "example.org")
                .header("connection", "close, , bad name, x@y, HOST")
                .header("x-kept", "yes")
                .body(())
                .unwrap(),
        );
        let none = ForwardedHeaders { x_forwarded: false, forwarded: false, trust_incoming: false };
        prepare(&mut p, "192.0.2.7:9", &none, false);
        assert!(!p.headers.contains_key("connection"));
        assert_eq!(p.headers["host"], "example.org", "Host is end-to-end whatever Connection says");
        assert_eq!(p.headers["x-kept"], "yes");
        assert_eq!(p.headers.len(), 2);
    }

    #[test]
    fn upgrade_keeps_its_headers() {
        let mut p = parts(
            http::Request::get("/ws").header("connection", "Upgrade").header("upgrade", "websocket").body(()).unwrap(),
        );
        assert!(is_upgrade(p.version, &p.headers));
        prepare(&mut p, "192.0.2.7:9", &ForwardedHeaders::default(), true);
        assert_eq!(p.headers["upgrade"], "websocket");
        assert_eq!(p.headers["connection"], "upgrade");
    }

    #[test]
    fn forwarded_headers_replace_client_copies_by_default() {
        let mut p = parts(
            http::Request::get("/")
                .header("host", "example.org")
                .header("x-forwarded-for", "6.6.6.6")
                .header("forwarded", "for=6.6.6.6")
                .body(())
                .unwrap(),
        );
        let opts = ForwardedHeaders { x_forwarded: true, forwarded: true, trust_incoming: false };
        prepare(&mut p, "192.0.2.7:9", &opts, false);
        assert_eq!(p.headers["x-forwarded-for"], "192.0.2.7");
        assert_eq!(p.headers["x-forwarded-proto"], "http");
        assert_eq!(p.headers["x-forwarded-host"], "example.org");
        assert_eq!(p.headers["forwarded"], "for=192.0.2.7;host=example.org;proto=http");
    }

    #[test]
    fn trusted_incoming_headers_are_appended_and_ipv6_quoted() {
        let mut p = parts(
            http::Request::get("/")
                .header("host", "example.org")
                .header("x-forwarded-for", "198.51.100.1")
                .header("forwarded", "for=198.51.100.1")
                .body(())
                .unwrap(),
        );
        let opts = ForwardedHeaders { x_forwarded: true, forwarded: true, trust_incoming: true };
        prepare(&mut p, "[2001:db8::5]:9", &opts, false);
        assert_eq!(p.headers["x-forwarded-for"], "198.51.100.1, 2001:db8::5");
        assert_eq!(p.headers["forwarded"], "for=198.51.100.1, for=\"[2001:db8::5]\";host=example.org;proto=http");
    }

    #[test]
    fn h2_request_gets_host_and_origin_form() {
        let mut p =
            parts(http::Request::get("http://example.org:8080/a?b=1").version(Version::HTTP_2).body(()).unwrap());
        let opts = ForwardedHeaders { x_forwarded: false, ..Default::default() };
        prepare(&mut p, "192.0.2.7:9", &opts, false);
        assert_eq!(p.headers["host"], "example.org:8080");
        assert_eq!(p.uri, "/a?b=1");
        assert_eq!(p.version, Version::HTTP_11);
        assert!(!p.headers.contains_key("x-forwarded-for"));
        // Without a path the target is "/", as it is written to the backend.
        for target in ["http://example.org", "http://example.org:8080/"] {
            let mut p = parts(http::Request::get(target).body(()).unwrap());
            prepare(&mut p, "192.0.2.7:9", &opts, false);
            assert_eq!((p.uri.to_string().as_str(), p.uri.path_and_query().unwrap().as_str()), ("/", "/"), "{target}");
        }
    }

    #[test]
    fn cookie_lookup() {
        let mut h = HeaderMap::new();
        h.append("cookie", HeaderValue::from_static("a=1; session=abc"));
        h.append("cookie", HeaderValue::from_static("z=9"));
        assert_eq!(cookie(&h, "session"), Some("abc"));
        assert_eq!(cookie(&h, "z"), Some("9"));
        assert_eq!(cookie(&h, "nope"), None);
    }
}
