//! Header fields of a head parsed in a read buffer, turned into an `http` map whose values
//! share the head's bytes instead of each being copied. httparse borrows the buffer while it
//! parses, so each field's place is kept as byte ranges until the head is frozen.
use std::mem::MaybeUninit;

use bytes::Bytes;
use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};

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
pub(crate) fn header_map<const N: usize>(head: &Bytes, ranges: &Ranges<N>) -> Result<HeaderMap, &'static str> {
    let ranges = ranges.as_slice();
    let mut headers = HeaderMap::with_capacity(ranges.len());
    for &[a, b, c, d] in ranges {
        let name = HeaderName::from_bytes(&head[a as usize..b as usize]).map_err(|_| "header name")?;
        // SAFETY: `Ranges` holds only values httparse accepted, whose bytes are HTAB, SP to
        // `~` and 0x80 to 0xFF (its HEADER_VALUE_MAP): exactly the bytes `HeaderValue` allows
        // (`b >= 32 && b != 127 || b == b'\t'`). Checked again, they cost a pass over every
        // value of every head (debug builds still check).
        let value = unsafe { HeaderValue::from_maybe_shared_unchecked(head.slice(c as usize..d as usize)) };
        headers.append(name, value);
    }
    Ok(headers)
}
