//! The XDP objects, built by build.rs (aya-build) and embedded in the binary.
use aya::include_bytes_aligned;

/// The balancer object (program `lb_ingress` and its maps).
pub static INGRESS: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-ingress"));
/// The decapsulator object (programs `lb_decap` and `lb_pass`).
pub static DECAP: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-decap"));

/// Whether the objects were really built (AYA_BUILD_SKIP leaves empty placeholders).
pub fn available() -> bool {
    !INGRESS.is_empty() && !DECAP.is_empty()
}
