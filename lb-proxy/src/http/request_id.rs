//! `X-Request-ID` values (`request_id = true`): 128 bits as 32 hex digits, unique without
//! coordination. A process-wide random key (std's `RandomState`, seeded from the OS) hashes a
//! counter, so ids neither repeat within the process nor follow a pattern across balancers.
use std::hash::{BuildHasher, RandomState};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use http::HeaderValue;

use super::fields::EditFields;

static KEY: LazyLock<RandomState> = LazyLock::new(RandomState::new);
static NEXT: AtomicU64 = AtomicU64::new(0);

pub(crate) const HEADER: http::HeaderName = http::HeaderName::from_static("x-request-id");

/// A new id.
pub(crate) fn new_id() -> HeaderValue {
    let n = NEXT.fetch_add(1, Relaxed);
    let (high, low) = (KEY.hash_one((n, 0u8)), KEY.hash_one((n, 1u8)));
    HeaderValue::from_str(&format!("{high:016x}{low:016x}")).expect("hex digits")
}

/// The request's id: the one it came with, or a new one written into its head.
pub(crate) fn ensure(headers: &mut impl EditFields) -> HeaderValue {
    match headers.first_owned(&HEADER) {
        Some(id) if !id.is_empty() => id,
        _ => {
            let id = new_id();
            headers.set(HEADER, id.clone());
            id
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_32_hex_digits_and_do_not_repeat() {
        let ids: std::collections::HashSet<_> = (0..10_000).map(|_| new_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|id| id.len() == 32 && id.as_bytes().iter().all(u8::is_ascii_hexdigit)));
    }

    #[test]
    fn a_request_keeps_its_own_id() {
        let mut h = http::HeaderMap::new();
        h.insert(HEADER, HeaderValue::from_static("abc"));
        assert_eq!(ensure(&mut h), "abc");
        let mut h = http::HeaderMap::new();
        let id = ensure(&mut h);
        assert_eq!(h[HEADER], id);
    }
}
