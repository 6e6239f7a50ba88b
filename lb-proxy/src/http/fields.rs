//! Header fields of a head parsed in a read buffer, kept as ranges into its bytes with names
//! lower-cased in place: a client's HTTP/1 request's (`RawRequest`, the head split off the read
//! buffer, edits kept beside it until the head is written to a backend) and a backend
//! response's (`RawFields`, a copy of the head kept with the backend connection). No hashing
//! and no allocation per field; an `http` map is made only where one is needed. httparse
//! borrows the buffer while it parses, so each field's place is kept as byte ranges.
use std::cell::RefCell;

use bytes::Bytes;
use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};

use crate::http::headers::{ConnectionOptions, Present};

/// Where a field's name and value lie in the buffer: `[name start, name end, value start,
/// value end]`.
pub(crate) type FieldRange = [u32; 4];

/// The offset of `part`, a slice of `buf`, from `buf`'s start.
pub(crate) fn offset(buf: &[u8], part: &[u8]) -> u32 {
    (part.as_ptr() as usize - buf.as_ptr() as usize) as u32
}

/// Where httparse found `h` in `buf`.
pub(crate) fn range_of(buf: &[u8], h: &httparse::Header<'_>) -> FieldRange {
    let (n, v) = (offset(buf, h.name.as_bytes()), offset(buf, h.value));
    [n, n + h.name.len() as u32, v, v + h.value.len() as u32]
}

thread_local! {
    /// Range lists of this worker's finished requests, emptied, for its next heads: one made
    /// anew would cost an allocation and its free on every request.
    static SPARE_RANGES: RefCell<Vec<Vec<FieldRange>>> = const { RefCell::new(Vec::new()) };
}

/// Spare range lists kept per worker (as many as a busy worker has requests in flight), and
/// the most fields a kept one has room for: an unusually large head's list is freed instead
/// of being held for ever. 64 lists of 64 ranges: 64 KiB a worker at most.
const SPARE_RANGES_KEPT: usize = 64;
const SPARE_RANGES_ROOM: usize = 64;

/// An empty range list, one a finished request left if this worker has one.
pub(crate) fn spare_ranges() -> Vec<FieldRange> {
    SPARE_RANGES.with_borrow_mut(Vec::pop).unwrap_or_default()
}

/// Keeps a finished request's range list, emptied, for a later head of this worker.
fn recycle(mut ranges: Vec<FieldRange>) {
    if ranges.capacity() == 0 || ranges.capacity() > SPARE_RANGES_ROOM {
        return;
    }
    ranges.clear();
    SPARE_RANGES.with_borrow_mut(|spare| {
        if spare.len() < SPARE_RANGES_KEPT {
            spare.push(ranges);
        }
    });
}

/// `into` (an empty map) filled with the fields at `ranges` in `head` whose (lower-case) names
/// `keep` takes, with room for `room` more.
fn map_of(
    head: &Bytes,
    ranges: &[FieldRange],
    mut headers: HeaderMap,
    room: usize,
    keep: impl Fn(&[u8]) -> bool,
) -> Result<HeaderMap, &'static str> {
    // Allocates only when the map has not the room already (a new one has none).
    headers.reserve(ranges.len() + room);
    for &[a, b, c, d] in ranges {
        let name = &head[a as usize..b as usize];
        if !keep(name) {
            continue;
        }
        let name = match common_response_name(name) {
            Some(known) => known,
            None => HeaderName::from_bytes(name).map_err(|_| "header name")?,
        };
        headers.append(name, shared_value(head, c, d));
    }
    Ok(headers)
}

/// The `HeaderName` of a (lower-case) name most backend responses carry, without parsing it:
/// `HeaderName::from_bytes` copies every name through a case table and then matches it
/// (about 110 instructions a field), a match on the bytes as they are costs a few.
fn common_response_name(name: &[u8]) -> Option<HeaderName> {
    use http::header;
    Some(match name {
        b"date" => header::DATE,
        b"content-length" => header::CONTENT_LENGTH,
        b"content-type" => header::CONTENT_TYPE,
        b"server" => header::SERVER,
        b"cache-control" => header::CACHE_CONTROL,
        b"etag" => header::ETAG,
        b"last-modified" => header::LAST_MODIFIED,
        b"set-cookie" => header::SET_COOKIE,
        b"vary" => header::VARY,
        b"expires" => header::EXPIRES,
        b"content-encoding" => header::CONTENT_ENCODING,
        b"location" => header::LOCATION,
        _ => return None,
    })
}

/// Read access to a head's fields, whether held in an `http` map or as ranges into the
/// head's bytes (`RawFields`, `RawRequest`): the framing, reuse and forwarding rules read them
/// all the same way.
pub(crate) trait Fields {
    /// Each field in order, its name lower-case.
    fn each(&self) -> impl Iterator<Item = (&[u8], &[u8])>;

    /// The values of every field named `name`, in order.
    fn values<'a>(&'a self, name: &'a HeaderName) -> impl Iterator<Item = &'a [u8]> {
        self.each().filter(move |(n, _)| *n == name.as_str().as_bytes()).map(|(_, v)| v)
    }

    /// The value of the first field named `name`.
    fn first(&self, name: &HeaderName) -> Option<&[u8]> {
        self.each().find(|(n, _)| *n == name.as_str().as_bytes()).map(|(_, v)| v)
    }

    /// Whether a field named `name` is among them.
    fn has(&self, name: &HeaderName) -> bool {
        self.first(name).is_some()
    }

    /// Which framing, hop-by-hop and client-information fields may be among them, when that
    /// is known without a pass over them (a flag that is false: there is none), and how many
    /// Host fields there are.
    fn hint(&self) -> Option<Present> {
        None
    }

    /// The value of the first field named `name` in any case (a name from configuration).
    fn first_named(&self, name: &str) -> Option<&[u8]> {
        self.each().find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v)
    }
}

impl Fields for HeaderMap {
    fn each(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()))
    }

    /// Nothing, for an empty map (a backend response's, whose fields are still its head's):
    /// the rules that would search it return at once.
    fn hint(&self) -> Option<Present> {
        self.is_empty().then(Present::default)
    }

    fn values<'a>(&'a self, name: &'a HeaderName) -> impl Iterator<Item = &'a [u8]> {
        self.get_all(name).into_iter().map(HeaderValue::as_bytes)
    }

    fn first(&self, name: &HeaderName) -> Option<&[u8]> {
        self.get(name).map(HeaderValue::as_bytes)
    }

    fn first_named(&self, name: &str) -> Option<&[u8]> {
        self.get(name).map(HeaderValue::as_bytes)
    }
}

/// Edits of a request's fields on its way to a backend (hop-by-hop fields removed, forwarding
/// fields and configured ones set), on an h2 request's map or an HTTP/1 request's ranges.
pub(crate) trait EditFields: Fields {
    /// Removes every field named `name`.
    fn remove(&mut self, name: &HeaderName) {
        self.remove_named(name.as_str());
    }

    /// Removes every field named `name` in any case (a name that is not a valid field name
    /// names none).
    fn remove_named(&mut self, name: &str);

    /// Removes every field whose (lower-case) name `keep` does not take.
    fn retain_names(&mut self, keep: impl Fn(&[u8]) -> bool);

    /// Replaces every field named `name` with one field of `value`.
    fn set(&mut self, name: HeaderName, value: HeaderValue);

    /// The first value of `name`, as a value of its own (sharing the head's bytes).
    fn first_owned(&self, name: &HeaderName) -> Option<HeaderValue>;

    /// These fields' map once the request is sent, emptied for its response's fields to fill
    /// (its room kept, no map to make); None for fields that are no map.
    fn into_spare_map(self) -> Option<HeaderMap>
    where
        Self: Sized,
    {
        None
    }
}

impl EditFields for HeaderMap {
    fn remove(&mut self, name: &HeaderName) {
        HeaderMap::remove(self, name);
    }

    fn into_spare_map(mut self) -> Option<HeaderMap> {
        self.clear();
        Some(self)
    }

    fn remove_named(&mut self, name: &str) {
        HeaderMap::remove(self, name);
    }

    fn retain_names(&mut self, keep: impl Fn(&[u8]) -> bool) {
        // A map has no retain: each name to remove is looked up (most heads have none).
        let gone: Vec<HeaderName> = self.keys().filter(|n| !keep(n.as_str().as_bytes())).cloned().collect();
        for name in gone {
            HeaderMap::remove(self, name);
        }
    }

    fn set(&mut self, name: HeaderName, value: HeaderValue) {
        HeaderMap::insert(self, name, value);
    }

    fn first_owned(&self, name: &HeaderName) -> Option<HeaderValue> {
        self.get(name).cloned()
    }
}

/// A value of `head` that httparse accepted, sharing its bytes.
fn shared_value(head: &Bytes, start: u32, end: u32) -> HeaderValue {
    // SAFETY: the ranges are only of values httparse accepted, whose bytes are HTAB, SP to
    // `~` and 0x80 to 0xFF (its HEADER_VALUE_MAP): exactly the bytes `HeaderValue` allows
    // (`b >= 32 && b != 127 || b == b'\t'`). Checked again, they cost a pass over every
    // value of every head (debug builds still check).
    unsafe { HeaderValue::from_maybe_shared_unchecked(head.slice(start as usize..end as usize)) }
}

/// A client's HTTP/1 request head's fields: ranges into the head split off the connection's
/// read buffer (names lower-cased in place before it was split), in the client's order. Edits
/// stay beside them: a removed field's range is dropped, a field set is added after the
/// client's, and the head written to a backend is the ranges' bytes, then the added fields.
pub(crate) struct RawRequest {
    head: Bytes,
    ranges: Vec<FieldRange>,
    added: Vec<(HeaderName, HeaderValue)>,
    /// Names noted as the head was parsed (`Present::note_request`) and as fields were set;
    /// a removal leaves its flag as it was.
    present: Present,
}

impl RawRequest {
    /// The fields at `ranges` (taken from `spare_ranges`, recycled when the request is
    /// dropped) of `head`, whose names are lower-case and noted in `present`.
    pub(crate) fn new(head: Bytes, ranges: Vec<FieldRange>, present: Present) -> Self {
        RawRequest { head, ranges, added: Vec::new(), present }
    }

    /// Notes that no Connection field is left: its options, once read, must not outlive it.
    fn connection_removed(&mut self) {
        self.present.connection = false;
        self.present.options = ConnectionOptions::default();
    }

    fn field(&self, &[a, b, c, d]: &FieldRange) -> (&[u8], &[u8]) {
        (&self.head[a as usize..b as usize], &self.head[c as usize..d as usize])
    }
}

#[cfg(test)]
impl RawRequest {
    /// The fields of `wire`, a whole request head, as the HTTP/1 parser keeps them.
    pub(crate) fn from_wire(wire: &[u8]) -> RawRequest {
        let mut head = wire.to_vec();
        let mut ranges = spare_ranges();
        let mut fields = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut fields);
        assert!(req.parse(&head).unwrap().is_complete());
        ranges.extend(req.headers.iter().map(|h| range_of(&head, h)));
        let mut present = Present::default();
        for &[a, b, c, d] in &ranges {
            head[a as usize..b as usize].make_ascii_lowercase();
            present.note_request(&head[a as usize..b as usize], &head[c as usize..d as usize]);
        }
        RawRequest::new(Bytes::from(head), ranges, present)
    }
}

impl Drop for RawRequest {
    fn drop(&mut self) {
        recycle(std::mem::take(&mut self.ranges));
    }
}

impl Fields for RawRequest {
    fn each(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let added = self.added.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
        self.ranges.iter().map(|r| self.field(r)).chain(added)
    }

    fn values<'a>(&'a self, name: &'a HeaderName) -> impl Iterator<Item = &'a [u8]> {
        let name = name.as_str().as_bytes();
        let added = self.added.iter().filter(move |(n, _)| n.as_str().as_bytes() == name).map(|(_, v)| v.as_bytes());
        named(&self.head, &self.ranges, name).chain(added)
    }

    fn first(&self, name: &HeaderName) -> Option<&[u8]> {
        let name = name.as_str().as_bytes();
        match self.ranges.iter().find(|r| is_named(&self.head, r, name)) {
            Some(&[_, _, c, d]) => Some(&self.head[c as usize..d as usize]),
            None => self.added.iter().find(|(n, _)| n.as_str().as_bytes() == name).map(|(_, v)| v.as_bytes()),
        }
    }

    fn hint(&self) -> Option<Present> {
        Some(self.present)
    }
}

impl EditFields for RawRequest {
    fn remove_named(&mut self, name: &str) {
        let (head, name) = (&self.head, name.as_bytes());
        self.ranges.retain(|&[a, b, _, _]| !head[a as usize..b as usize].eq_ignore_ascii_case(name));
        if !self.added.is_empty() {
            self.added.retain(|(n, _)| !n.as_str().as_bytes().eq_ignore_ascii_case(name));
        }
        if name.eq_ignore_ascii_case(b"connection") {
            self.connection_removed();
        } else if name.eq_ignore_ascii_case(b"host") {
            self.present.hosts = 0;
        }
    }

    fn retain_names(&mut self, keep: impl Fn(&[u8]) -> bool) {
        let head = &self.head;
        self.ranges.retain(|&[a, b, _, _]| keep(&head[a as usize..b as usize]));
        if !self.added.is_empty() {
            self.added.retain(|(n, _)| keep(n.as_str().as_bytes()));
        }
        if self.present.connection && !keep(b"connection") {
            self.connection_removed();
        }
        if self.present.hosts > 0 && !keep(b"host") {
            self.present.hosts = 0;
        }
    }

    fn set(&mut self, name: HeaderName, value: HeaderValue) {
        self.remove(&name);
        self.present.note_request(name.as_str().as_bytes(), value.as_bytes());
        self.added.push((name, value));
    }

    fn first_owned(&self, name: &HeaderName) -> Option<HeaderValue> {
        let named = |&&[a, b, _, _]: &&FieldRange| &self.head[a as usize..b as usize] == name.as_str().as_bytes();
        match self.ranges.iter().find(named) {
            Some(&[_, _, c, d]) => Some(shared_value(&self.head, c, d)),
            None => self.added.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()),
        }
    }
}

/// A plain decimal number (digits only, at least one) that fits in a u64.
pub(crate) fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d))
    })
}

/// A value as text, as `HeaderValue::to_str` takes it: visible ASCII, spaces and tabs only.
pub(crate) fn text(value: &[u8]) -> Option<&str> {
    if !value.iter().all(|&b| b == b'\t' || (32..127).contains(&b)) {
        return None;
    }
    // SAFETY: every byte is ASCII, so the bytes are UTF-8 (checked again, they cost a pass).
    Some(unsafe { std::str::from_utf8_unchecked(value) })
}

/// A backend response head's fields as ranges into a copy of the head's bytes, names
/// lower-cased in place: no hashing and no allocation per field, and, kept with the
/// backend connection, no allocation at all once its buffers have grown. An HTTP/1 client's
/// response is written straight from it; a map is made only where one is needed (h2 clients,
/// rules that edit the response's fields).
#[derive(Default)]
pub(crate) struct RawFields {
    head: Vec<u8>,
    ranges: Vec<FieldRange>,
    /// Which framing and reuse fields are among them, noted as they were recorded.
    present: Present,
}

impl RawFields {
    /// Takes the fields httparse found in `buf` (the head's first `len` bytes).
    pub(crate) fn record(&mut self, buf: &[u8], len: usize, fields: &[httparse::Header<'_>]) {
        self.head.clear();
        self.head.extend_from_slice(&buf[..len]);
        self.ranges.clear();
        self.present = Present::default();
        for h in fields {
            let range = range_of(buf, h);
            let name = &mut self.head[range[0] as usize..range[1] as usize];
            name.make_ascii_lowercase();
            self.present.note(name, h.value);
            self.ranges.push(range);
        }
    }

    /// Which framing and reuse fields the head carries.
    pub(crate) fn present(&self) -> Present {
        self.present
    }

    /// These fields in `into` (an empty map), less the hop-by-hop ones unless `hop_by_hop`,
    /// with room for `room` fields more. Its values share one copy of the head.
    pub(crate) fn to_map(&self, hop_by_hop: bool, into: HeaderMap, room: usize) -> Result<HeaderMap, &'static str> {
        let head = shared_copy(&self.head);
        map_of(&head, &self.ranges, into, room, |name| {
            hop_by_hop || crate::http::headers::hop_by_hop_name(name).is_none()
        })
    }
}

/// A copy of `bytes` that the map's values share. `Bytes::copy_from_slice` allocates the copy,
/// then, as the first value is sliced off it, a second block for the count its slices share;
/// a head that fits `Inline` is copied into the same block as its count, one allocation.
fn shared_copy(bytes: &[u8]) -> Bytes {
    match bytes.len() {
        0..=256 => Inline::<256>::of(bytes),
        257..=512 => Inline::<512>::of(bytes),
        _ => Bytes::copy_from_slice(bytes),
    }
}

struct Inline<const N: usize> {
    len: usize,
    buf: [u8; N],
}

impl<const N: usize> Inline<N> {
    fn of(bytes: &[u8]) -> Bytes {
        let mut buf = [0; N];
        buf[..bytes.len()].copy_from_slice(bytes);
        Bytes::from_owner(Inline { len: bytes.len(), buf })
    }
}

impl<const N: usize> AsRef<[u8]> for Inline<N> {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Fields for RawFields {
    fn each(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.ranges.iter().map(|&[a, b, c, d]| (&self.head[a as usize..b as usize], &self.head[c as usize..d as usize]))
    }

    fn values<'a>(&'a self, name: &'a HeaderName) -> impl Iterator<Item = &'a [u8]> {
        named(&self.head, &self.ranges, name.as_str().as_bytes())
    }

    fn first(&self, name: &HeaderName) -> Option<&[u8]> {
        let name = name.as_str().as_bytes();
        let &[_, _, c, d] = self.ranges.iter().find(|r| is_named(&self.head, r, name))?;
        Some(&self.head[c as usize..d as usize])
    }
}

/// The values of the fields at `ranges` in `head` whose (lower-case) name is `name`. Lengths
/// are compared first, from the ranges alone: most fields' names differ in length from the one
/// looked for, and then neither is sliced nor compared.
fn named<'a>(head: &'a [u8], ranges: &'a [FieldRange], name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
    ranges.iter().filter(move |r| is_named(head, r, name)).map(move |&[_, _, c, d]| &head[c as usize..d as usize])
}

/// Whether the field at `range` in `head` is named `name` (lower-case), lengths compared first.
fn is_named(head: &[u8], &[a, b, _, _]: &FieldRange, name: &[u8]) -> bool {
    (b - a) as usize == name.len() && head[a as usize..b as usize] == *name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(head: &'static [u8]) -> RawRequest {
        RawRequest::from_wire(head)
    }

    fn lines(fields: &impl Fields) -> Vec<String> {
        fields.each().map(|(n, v)| format!("{}: {}", String::from_utf8_lossy(n), String::from_utf8_lossy(v))).collect()
    }

    #[test]
    fn a_recycled_range_list_keeps_nothing_of_its_last_request() {
        let first = raw(b"GET / HTTP/1.1\r\nHost: a\r\nX-Secret: 1\r\nCookie: s=1\r\n\r\n");
        assert_eq!(lines(&first).len(), 3);
        drop(first);
        let second = raw(b"GET / HTTP/1.1\r\nHost: b\r\n\r\n");
        assert!(second.ranges.capacity() >= 3, "the spare list was taken");
        assert_eq!(lines(&second), ["host: b"]);
    }

    #[test]
    fn request_edits_remove_in_any_case_and_set_after_the_clients_fields() {
        let mut r = raw(b"GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-b: 2\r\nX-a: 3\r\n\r\n");
        assert_eq!(r.values(&HeaderName::from_static("x-a")).collect::<Vec<_>>(), [b"1", b"3"]);
        assert_eq!(r.first_named("X-B"), Some(&b"2"[..]));
        r.remove_named("X-A");
        r.set(http::header::HOST, HeaderValue::from_static("b"));
        r.set(HeaderName::from_static("x-c"), HeaderValue::from_static("4"));
        assert_eq!(lines(&r), ["x-b: 2", "host: b", "x-c: 4"]);
        assert_eq!(r.first_owned(&http::header::HOST).unwrap(), "b");
        assert_eq!(r.first_owned(&HeaderName::from_static("x-b")).unwrap(), "2");
        r.remove_named("x-c");
        r.remove_named("bad name");
        assert_eq!(lines(&r), ["x-b: 2", "host: b"]);
    }

    #[test]
    fn common_response_names_are_the_names_parsed() {
        for name in [
            "date",
            "content-length",
            "content-type",
            "server",
            "cache-control",
            "etag",
            "last-modified",
            "set-cookie",
            "vary",
            "expires",
            "content-encoding",
            "location",
        ] {
            let parsed = HeaderName::from_bytes(name.as_bytes()).unwrap();
            assert_eq!(common_response_name(name.as_bytes()), Some(parsed), "{name}");
        }
        for other in ["x-date", "dates", "Date", "content-lengt", ""] {
            assert_eq!(common_response_name(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn decimals_are_digits_only_and_fit() {
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b"1024"), Some(1024));
        assert_eq!(decimal(b"18446744073709551615"), Some(u64::MAX));
        for bad in [&b""[..], b"+1", b"-1", b"1 ", b"0x10", b"1,2", b"18446744073709551616", b"\xd9\xa1"] {
            assert_eq!(decimal(bad), None, "{bad:?}");
        }
    }
}
