//! What makes a backend acceptable, written once for the two ways backends arrive: lb.toml
//! (`validate`, with FILE:LINE) and the API (`backends add`).
use std::net::{IpAddr, SocketAddr};

use super::{Forwarding, MAX_WEIGHT};

/// Why a backend cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendRule {
    /// A weight outside `0..=MAX_WEIGHT`.
    #[error("weight {0} is out of range (0-{MAX_WEIGHT})")]
    WeightOutOfRange(i64),
    /// An IPv6 backend behind a VIP the XDP data plane serves.
    #[error("backend {0}: IPv6 backends are not supported by the XDP data plane yet")]
    UnsupportedFamily(SocketAddr),
    /// An address no backend can have (unspecified, broadcast, multicast, the VIP itself).
    #[error("backend {0}: {1}")]
    Unusable(SocketAddr, &'static str),
    /// More backends than the VIP's ring has slots.
    #[error("{count} backends do not fit a ring of {ring_size} slots (raise daemon.ring_size)")]
    RingFull { count: u64, ring_size: u32 },
}

/// A backend weight, checked.
pub fn weight(value: i64) -> Result<u32, BackendRule> {
    u32::try_from(value).ok().filter(|w| *w <= MAX_WEIGHT).ok_or(BackendRule::WeightOutOfRange(value))
}

/// Whether `backend` can serve the VIP at `vip`, forwarded as `forwarding`.
pub fn address(forwarding: Forwarding, vip: SocketAddr, backend: SocketAddr) -> Result<(), BackendRule> {
    let xdp = forwarding.is_xdp();
    if xdp && backend.is_ipv6() {
        return Err(BackendRule::UnsupportedFamily(backend));
    }
    let unusable = |why| Err(BackendRule::Unusable(backend, why));
    let ip = backend.ip();
    if ip.is_unspecified() {
        return unusable("the unspecified address reaches no host");
    }
    if ip.is_multicast() || matches!(ip, IpAddr::V4(v4) if v4.is_broadcast()) {
        return unusable("a broadcast or multicast address is not one host");
    }
    if xdp && ip.is_loopback() {
        return unusable(
            "a loopback address is this host, which the XDP data plane cannot forward to (use forwarding = \"proxy\")",
        );
    }
    if ip == vip.ip() && (xdp || backend.port() == vip.port()) {
        return unusable("the VIP itself: its traffic would loop");
    }
    Ok(())
}

/// Whether `count` backends fit the ring.
pub fn ring_room(count: usize, ring_size: u32) -> Result<(), BackendRule> {
    if count as u64 > ring_size as u64 {
        return Err(BackendRule::RingFull { count: count as u64, ring_size });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights() {
        assert_eq!(weight(0), Ok(0));
        assert_eq!(weight(65_535), Ok(65_535));
        assert_eq!(weight(65_536), Err(BackendRule::WeightOutOfRange(65_536)));
        assert_eq!(weight(-1).unwrap_err().to_string(), "weight -1 is out of range (0-65535)");
    }

    #[test]
    fn impossible_backends_are_refused() {
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        let vip = sa("203.0.113.10:80");
        let nat = |backend| address(Forwarding::Nat, vip, backend);
        let proxy = |backend| address(Forwarding::Proxy, vip, backend);
        for bad in
            ["0.0.0.0:80", "255.255.255.255:80", "224.0.0.1:80", "203.0.113.10:8080", "127.0.0.1:80", "127.1.2.3:80"]
        {
            assert!(matches!(nat(sa(bad)), Err(BackendRule::Unusable(..))), "{bad} behind NAT");
        }
        assert!(matches!(nat(sa("[2001:db8::1]:80")), Err(BackendRule::UnsupportedFamily(_))));
        // The proxy connects from userspace: the VIP's address on another port works.
        for good in ["127.0.0.1:8080", "203.0.113.10:8080", "[2001:db8::1]:80"] {
            assert_eq!(proxy(sa(good)), Ok(()), "{good} behind the proxy");
        }
        assert!(proxy(sa("203.0.113.10:80")).is_err(), "the proxy's own listener");
        assert_eq!(nat(sa("198.51.100.1:8080")), Ok(()));
    }

    #[test]
    fn ring_room_counts_backends_against_slots() {
        assert_eq!(ring_room(2, 2), Ok(()));
        assert_eq!(
            ring_room(3, 2).unwrap_err().to_string(),
            "3 backends do not fit a ring of 2 slots (raise daemon.ring_size)"
        );
    }
}
