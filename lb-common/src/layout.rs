//! The layout version of the balancer's pinned maps.
//!
//! A daemon that starts on pins made by another build needs to know how their bytes are laid
//! out: sizes alone do not say it (two field orders have the same size). Every build records
//! [`LAYOUT_VERSION`] for each map it pins (lb-ctl's `dataplane::layout`), and a later build
//! reuses a map whose layout has not changed since, migrates one that changed (a conversion per
//! map and older version), and refuses a newer version than its own (a downgrade).
//!
//! Version history (bump [`LAYOUT_VERSION`] and add a line when a pinned map's layout changes):
//! - 1: `FlowEntry` began with `vip_id`, `VipInfo` with `forwarding, hash, _pad` (id after).
//!   Built again by the test-only feature `layout-v1-test`, so the upgrade from it is tested.
//! - 2: `FlowEntry` begins with `backend_id`, `VipInfo` with `id` (FLOWS, VIPS, VIP_INFO).
//! - 3: COUNTERS gained the QUIC counters at its end; QUIC_SERVERS is new. (`VipInfo.flags`
//!   took a padding byte that older builds left 0: QUIC off, no conversion.)
//! - 4: CONFIG's `share_flows` became a byte, followed by `table_hash_kind`: tables made by
//!   this build hash with `table_hash::kind::PAIRED`. Older CONFIG values read as
//!   `CHAINED`, their tables' hash, so they are kept as they are; an older build must not
//!   start on a version 4 CONFIG (it would read a `PAIRED` table with the chained hash).
//! - 5: COUNTERS gained `icmp_to_client` at its end.

/// The layout version of the maps this build pins.
#[cfg(not(feature = "layout-v1-test"))]
pub const LAYOUT_VERSION: u32 = 5;
/// The layout version of the maps this build pins (test-only build of version 1).
#[cfg(feature = "layout-v1-test")]
pub const LAYOUT_VERSION: u32 = 1;
