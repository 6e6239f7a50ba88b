//! Header fields of a head parsed in a read buffer: a client request's turned into an `http`
//! map whose values share the head's bytes instead of each being copied, a backend response's
//! kept as ranges into its head (`RawFields`). httparse borrows the buffer while it parses, so
//! each field's place is kept as byte ranges until the head is frozen.
use std::cell::RefCell;
use std::mem::MaybeUninit;

use bytes::Bytes;
use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};

use crate::http::headers::Present;

/// Where a field's name and value lie in the buffer: `[name start, name end, value start,
/// value end]`.
pub(crate) type FieldRange = [u32; 4];

/// The offset of `part`, a slice of `buf`, from `buf`'s start.
pub(crate) fn offset(buf: &[u8], part: &[u8]) -> u32 {
    (part.as_ptr() as usize - buf.as_ptr() as usize) as u32
}

/// The ranges of a head's fields: up to `N` on the stack, more on the heap. The stack's room
/// is left uninitialised: zeroed, it cost a 2 KiB memset on every head parsed, for the few
/// fields a head has.
pub(crate) struct Ranges<const N: usize> {
    stack: [MaybeUninit<FieldRange>; N],
    heap: Vec<FieldRange>,
    len: usize,
}

impl<const N: usize> Ranges<N> {
    pub(crate) fn new() -> Self {
        Ranges { stack: [const { MaybeUninit::uninit() }; N], heap: Vec::new(), len: 0 }
    }

    /// Records where each parsed field lies in `buf`.
    pub(crate) fn record(&mut self, buf: &[u8], fields: &[httparse::Header<'_>]) {
        let range = |h: &httparse::Header<'_>| {
            let (n, v) = (offset(buf, h.name.as_bytes()), offset(buf, h.value));
            [n, n + h.name.len() as u32, v, v + h.value.len() as u32]
        };
        if fields.len() <= N {
            for (r, h) in self.stack.iter_mut().zip(fields) {
                r.write(range(h));
            }
        } else {
            self.heap = fields.iter().map(range).collect();
        }
        self.len = fields.len();
    }

    fn as_slice(&self) -> &[FieldRange] {
        if self.len > N {
            return &self.heap;
        }
        // SAFETY: `record` wrote the first `len` (<= N) elements of `stack`, and only it sets
        // `len`; MaybeUninit<T> has T's layout.
        unsafe { std::slice::from_raw_parts(self.stack.as_ptr().cast::<FieldRange>(), self.len) }
    }
}

/// The map of the recorded fields, from the head's frozen bytes (the buffer they were
/// recorded in, split off its front); the error says which part of a field is not valid.
/// The map is one this worker's finished requests left (see `recycle`).
pub(crate) fn header_map<const N: usize>(head: &Bytes, ranges: &Ranges<N>) -> Result<HeaderMap, &'static str> {
    let spare = SPARE_MAPS.with_borrow_mut(Vec::pop).unwrap_or_default();
    map_of(spare, head, ranges.as_slice(), |_| true)
}

thread_local! {
    /// Request maps of this worker's finished requests, emptied, for its next heads: a map
    /// made anew cost two allocations and their frees on every request.
    static SPARE_MAPS: RefCell<Vec<HeaderMap>> = const { RefCell::new(Vec::new()) };
}

/// Spare maps kept per worker, and the most fields a kept one has room for (an unusually
/// large head's map is freed instead of being held for ever). As many as a busy worker has
/// requests in flight: with fewer, past that many requests each one made a map and another
/// freed one (50 keep-alive connections on 2 workers: 42% of requests). A usual head's map
/// takes under 2 KiB, so a worker holds some 128 KiB of them at most.
const SPARE_MAPS_KEPT: usize = 64;
const SPARE_MAP_ROOM: usize = 64;

/// Keeps a finished request's map, emptied, for a later head of this worker.
pub(crate) fn recycle(mut map: HeaderMap) {
    if map.capacity() == 0 || map.capacity() > SPARE_MAP_ROOM {
        return;
    }
    map.clear();
    SPARE_MAPS.with_borrow_mut(|spare| {
        if spare.len() < SPARE_MAPS_KEPT {
            spare.push(map);
        }
    });
}

/// Appends to `headers` the fields at `ranges` in `head` whose (lower-case) names `keep` takes.
fn map_of(
    mut headers: HeaderMap,
    head: &Bytes,
    ranges: &[FieldRange],
    keep: impl Fn(&[u8]) -> bool,
) -> Result<HeaderMap, &'static str> {
    headers.reserve(ranges.len());
    for &[a, b, c, d] in ranges {
        let name = &head[a as usize..b as usize];
        if !keep(name) {
            continue;
        }
        let name = HeaderName::from_bytes(name).map_err(|_| "header name")?;
        // SAFETY: the ranges are only of values httparse accepted, whose bytes are HTAB, SP to
        // `~` and 0x80 to 0xFF (its HEADER_VALUE_MAP): exactly the bytes `HeaderValue` allows
        // (`b >= 32 && b != 127 || b == b'\t'`). Checked again, they cost a pass over every
        // value of every head (debug builds still check).
        let value = unsafe { HeaderValue::from_maybe_shared_unchecked(head.slice(c as usize..d as usize)) };
        headers.append(name, value);
    }
    Ok(headers)
}

/// Read access to a head's fields, whether held in an `http` map or as ranges into the
/// head's bytes (`RawFields`): the framing and reuse rules read both the same way.
pub(crate) trait Fields {
    /// Each field in order, its name lower-case.
    fn each(&self) -> impl Iterator<Item = (&[u8], &[u8])>;

    /// The values of every field named `name`, in order.
    fn values<'a>(&'a self, name: &'a HeaderName) -> impl Iterator<Item = &'a [u8]> {
        self.each().filter(move |(n, _)| *n == name.as_str().as_bytes()).map(|(_, v)| v)
    }
}

impl Fields for HeaderMap {
    fn each(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()))
    }

    fn values<'a>(&'a self, name: &'a HeaderName) -> impl Iterator<Item = &'a [u8]> {
        self.get_all(name).into_iter().map(HeaderValue::as_bytes)
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
            let (n, v) = (offset(buf, h.name.as_bytes()), offset(buf, h.value));
            let range = [n, n + h.name.len() as u32, v, v + h.value.len() as u32];
            let name = &mut self.head[range[0] as usize..range[1] as usize];
            name.make_ascii_lowercase();
            self.present.note(name);
            self.ranges.push(range);
        }
    }

    /// Which framing and reuse fields the head carries.
    pub(crate) fn present(&self) -> Present {
        self.present
    }

    /// The map of these fields, less the hop-by-hop ones unless `hop_by_hop`. Its values share
    /// one copy of the head.
    pub(crate) fn to_map(&self, hop_by_hop: bool) -> Result<HeaderMap, &'static str> {
        let head = Bytes::copy_from_slice(&self.head);
        map_of(HeaderMap::new(), &head, &self.ranges, |name| {
            hop_by_hop || crate::http::headers::hop_by_hop_name(name).is_none()
        })
    }
}

impl Fields for RawFields {
    fn each(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.ranges.iter().map(|&[a, b, c, d]| (&self.head[a as usize..b as usize], &self.head[c as usize..d as usize]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The map of `head`'s fields, as the request parser makes it.
    fn parsed(head: &'static [u8]) -> HeaderMap {
        let mut fields = [httparse::EMPTY_HEADER; 8];
        let mut req = httparse::Request::new(&mut fields);
        assert!(req.parse(head).unwrap().is_complete());
        let mut ranges = Ranges::<8>::new();
        ranges.record(head, req.headers);
        header_map(&Bytes::from_static(head), &ranges).unwrap()
    }

    #[test]
    fn a_recycled_map_keeps_nothing_of_its_last_request() {
        let first = parsed(b"GET / HTTP/1.1\r\nHost: a\r\nX-Secret: 1\r\nCookie: s=1\r\n\r\n");
        assert_eq!(first.len(), 3);
        recycle(first);
        let second = parsed(b"GET / HTTP/1.1\r\nHost: b\r\n\r\n");
        assert!(second.capacity() >= 3, "the spare map was taken");
        assert_eq!(second.iter().collect::<Vec<_>>(), [(&http::header::HOST, &HeaderValue::from_static("b"))]);
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
