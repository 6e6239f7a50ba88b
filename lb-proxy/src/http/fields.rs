//! Header fields of a head parsed in a read buffer, turned into an `http` map whose values
//! share the head's bytes instead of each being copied. httparse borrows the buffer while it
//! parses, so each field's place is kept as byte ranges until the head is frozen.
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

/// Records where each parsed field lies in `buf`.
pub(crate) fn record(buf: &[u8], fields: &[httparse::Header<'_>], ranges: &mut [FieldRange]) {
    for (r, h) in ranges.iter_mut().zip(fields) {
        let (n, v) = (offset(buf, h.name.as_bytes()), offset(buf, h.value));
        *r = [n, n + h.name.len() as u32, v, v + h.value.len() as u32];
    }
}

/// The map of the recorded fields, from the head's frozen bytes; the error says which part of
/// a field is not valid.
pub(crate) fn header_map(head: &Bytes, ranges: &[FieldRange]) -> Result<HeaderMap, &'static str> {
    let mut headers = HeaderMap::with_capacity(ranges.len());
    for &[a, b, c, d] in ranges {
        let name = HeaderName::from_bytes(&head[a as usize..b as usize]).map_err(|_| "header name")?;
        let value = HeaderValue::from_maybe_shared(head.slice(c as usize..d as usize)).map_err(|_| "header value")?;
        headers.append(name, value);
    }
    Ok(headers)
}
