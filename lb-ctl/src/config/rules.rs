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
    /// A backend of another family than the VIP, behind a VIP whose packets keep the VIP's
    /// family on the way to the backend (`nat`, `dsr-l2`).
    #[error(
        "backend {backend}: an {} backend cannot serve the {} VIP {vip} with forwarding \"{}\" ({})",
        family(backend.ip()),
        family(vip.ip()),
        forwarding.as_str(),
        same_family_reason(*forwarding)
    )]
    VipFamily { backend: SocketAddr, vip: SocketAddr, forwarding: Forwarding },
    /// A backend of another family than `encap_source`, behind a VIP that encapsulates
    /// (`dsr-ipip`, `dsr-gue`): the outer header goes from `encap_source` to the backend.
    #[error(
        "backend {backend}: an {} backend cannot be reached with forwarding \"{}\" from the {} encap_source {encap_source} (the outer header goes from encap_source to the backend, so every backend must be of encap_source's family; the VIP's own family may differ)",
        family(backend.ip()),
        forwarding.as_str(),
        family(*encap_source)
    )]
    EncapFamily { backend: SocketAddr, encap_source: IpAddr, forwarding: Forwarding },
    /// An address no backend can have (unspecified, broadcast, multicast, the VIP itself).
    #[error("backend {0}: {1}")]
    Unusable(SocketAddr, &'static str),
    /// More backends than the VIP's ring has slots.
    #[error("{count} backends do not fit a ring of {ring_size} slots (raise daemon.ring_size)")]
    RingFull { count: u64, ring_size: u32 },
}

/// "IPv4" or "IPv6".
pub fn family(ip: IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

fn same_family_reason(forwarding: Forwarding) -> &'static str {
    match forwarding {
        Forwarding::DsrL2 => "dsr-l2 sends the unchanged packet to a neighbour of the VIP's family",
        _ => "NAT does not translate between families",
    }
}

/// Whether `ip` is an IPv4-mapped IPv6 address (`::ffff:0:0/96`).
pub fn is_v4_mapped(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

/// Whether `ip` is an IPv6 link-local address (`fe80::/10`).
pub fn is_v6_link_local(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local())
}

/// A backend weight, checked.
pub fn weight(value: i64) -> Result<u32, BackendRule> {
    u32::try_from(value).ok().filter(|w| *w <= MAX_WEIGHT).ok_or(BackendRule::WeightOutOfRange(value))
}

/// Whether `backend` can serve the VIP at `vip`, forwarded as `forwarding` (with outer source
/// `encap_source` when the VIP encapsulates).
pub fn address(
    forwarding: Forwarding,
    vip: SocketAddr,
    encap_source: Option<IpAddr>,
    backend: SocketAddr,
) -> Result<(), BackendRule> {
    let xdp = forwarding.is_xdp();
    let unusable = |why| Err(BackendRule::Unusable(backend, why));
    let ip = backend.ip();
    if ip.is_unspecified() {
        return unusable("the unspecified address reaches no host");
    }
    if ip.is_multicast() || matches!(ip, IpAddr::V4(v4) if v4.is_broadcast()) {
        return unusable("a broadcast or multicast address is not one host");
    }
    if xdp && is_v4_mapped(ip) {
        return unusable("an IPv4-mapped IPv6 address (::ffff:0:0/96) is an IPv4 host: write its IPv4 address");
    }
    if xdp && is_v6_link_local(ip) {
        return unusable(
            "a link-local address (fe80::/10) needs an interface scope, which the XDP data plane's route (FIB) lookup does not have: use a global or unique-local address",
        );
    }
    if xdp && ip.is_loopback() {
        return unusable(
            "a loopback address is this host, which the XDP data plane cannot forward to (use forwarding = \"proxy\")",
        );
    }
    if ip == vip.ip() && (xdp || backend.port() == vip.port()) {
        return unusable("the VIP itself: its traffic would loop");
    }
    match forwarding {
        Forwarding::Nat | Forwarding::DsrL2 if ip.is_ipv4() != vip.is_ipv4() => {
            Err(BackendRule::VipFamily { backend, vip, forwarding })
        }
        Forwarding::DsrIpip | Forwarding::DsrGue => match encap_source {
            Some(source) if source.is_ipv4() != ip.is_ipv4() => {
                Err(BackendRule::EncapFamily { backend, encap_source: source, forwarding })
            }
            _ => Ok(()),
        },
        _ => Ok(()),
    }
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
        let nat = |backend| address(Forwarding::Nat, vip, None, backend);
        let proxy = |backend| address(Forwarding::Proxy, vip, None, backend);
        for bad in
            ["0.0.0.0:80", "255.255.255.255:80", "224.0.0.1:80", "203.0.113.10:8080", "127.0.0.1:80", "127.1.2.3:80"]
        {
            assert!(matches!(nat(sa(bad)), Err(BackendRule::Unusable(..))), "{bad} behind NAT");
        }
        assert!(matches!(nat(sa("[2001:db8::1]:80")), Err(BackendRule::VipFamily { .. })));
        // The proxy connects from userspace: the VIP's address on another port works.
        for good in ["127.0.0.1:8080", "203.0.113.10:8080", "[2001:db8::1]:80"] {
            assert_eq!(proxy(sa(good)), Ok(()), "{good} behind the proxy");
        }
        assert!(proxy(sa("203.0.113.10:80")).is_err(), "the proxy's own listener");
        assert_eq!(nat(sa("198.51.100.1:8080")), Ok(()));
    }

    #[test]
    fn families_follow_the_forwarding() {
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let (v4, v6) = (sa("203.0.113.10:80"), sa("[2001:db8::10]:80"));
        // NAT and dsr-l2: the backend's family is the VIP's.
        for f in [Forwarding::Nat, Forwarding::DsrL2] {
            assert_eq!(address(f, v6, None, sa("[2001:db8::11]:8080")), Ok(()));
            assert!(matches!(address(f, v6, None, sa("198.51.100.1:80")), Err(BackendRule::VipFamily { .. })));
            assert!(matches!(address(f, v4, None, sa("[2001:db8::11]:80")), Err(BackendRule::VipFamily { .. })));
        }
        assert_eq!(
            address(Forwarding::Nat, v4, None, sa("[2001:db8::11]:8080")).unwrap_err().to_string(),
            "backend [2001:db8::11]:8080: an IPv6 backend cannot serve the IPv4 VIP 203.0.113.10:80 with forwarding \"nat\" (NAT does not translate between families)"
        );
        assert_eq!(
            address(Forwarding::DsrL2, v6, None, sa("198.51.100.1:80")).unwrap_err().to_string(),
            "backend 198.51.100.1:80: an IPv4 backend cannot serve the IPv6 VIP [2001:db8::10]:80 with forwarding \"dsr-l2\" (dsr-l2 sends the unchanged packet to a neighbour of the VIP's family)"
        );
        // Encapsulation: the backend's family is encap_source's; the VIP's may differ.
        for f in [Forwarding::DsrIpip, Forwarding::DsrGue] {
            for vip in [v4, v6] {
                assert_eq!(address(f, vip, Some(ip("2001:db8::fe")), sa("[2001:db8::11]:80")), Ok(()));
                assert_eq!(address(f, vip, Some(ip("198.51.100.254")), sa("198.51.100.1:80")), Ok(()));
                assert!(matches!(
                    address(f, vip, Some(ip("2001:db8::fe")), sa("198.51.100.1:80")),
                    Err(BackendRule::EncapFamily { .. })
                ));
                assert!(matches!(
                    address(f, vip, Some(ip("198.51.100.254")), sa("[2001:db8::11]:80")),
                    Err(BackendRule::EncapFamily { .. })
                ));
            }
        }
        let e = address(Forwarding::DsrGue, v4, Some(ip("2001:db8::fe")), sa("198.51.100.1:80")).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "backend 198.51.100.1:80: an IPv4 backend cannot be reached with forwarding \"dsr-gue\" from the IPv6 encap_source 2001:db8::fe"
            ),
            "{e}"
        );
        // The proxy connects from userspace, to either family.
        assert_eq!(address(Forwarding::Proxy, v4, None, sa("[2001:db8::11]:80")), Ok(()));
    }

    #[test]
    fn link_local_and_v4_mapped_backends_are_refused() {
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        let vip = sa("[2001:db8::10]:80");
        for f in [Forwarding::Nat, Forwarding::DsrL2] {
            let e = address(f, vip, None, sa("[fe80::1]:80")).unwrap_err();
            assert!(matches!(e, BackendRule::Unusable(..)), "{e}");
            assert!(e.to_string().contains("link-local"), "{e}");
            let e = address(f, vip, None, sa("[::ffff:198.51.100.1]:80")).unwrap_err();
            assert!(e.to_string().contains("IPv4-mapped"), "{e}");
            assert!(matches!(address(f, vip, None, sa("[ff02::1]:80")), Err(BackendRule::Unusable(..))));
            assert!(matches!(address(f, vip, None, sa("[::1]:80")), Err(BackendRule::Unusable(..))));
            assert!(matches!(address(f, vip, None, sa("[::]:80")), Err(BackendRule::Unusable(..))));
            assert!(matches!(address(f, vip, None, sa("[2001:db8::10]:8080")), Err(BackendRule::Unusable(..))));
        }
        let encap = Some("2001:db8::fe".parse().unwrap());
        assert!(matches!(address(Forwarding::DsrIpip, vip, encap, sa("[fe80::1]:80")), Err(BackendRule::Unusable(..))));
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
