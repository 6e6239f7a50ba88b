//! Whether `dsr-l2` backends are neighbours of this host. dsr-l2 sends the unchanged packet to
//! the backend's own MAC address, so a backend the host reaches through a gateway cannot be
//! served: the program drops every such packet (`drop_backend_not_adjacent`). The kernel's own
//! route lookup (RTM_GETROUTE, as `ip route get` does) tells: a route with a gateway is not
//! adjacent. Checked when the daemon starts or reloads (a warning: routes may still be coming
//! up) and by `backends add` (refused: the operator is there to fix it).
use std::net::{IpAddr, SocketAddr};

use futures_util::TryStreamExt as _;
use rtnetlink::RouteMessageBuilder;
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute};

use crate::config::Forwarding;
use crate::state::{State, VipState};

/// How the host reaches a backend address.
#[derive(Clone, Debug, PartialEq)]
pub enum Reach {
    /// On a link of this host: the backend is its own next hop.
    OnLink,
    /// Through the gateway `0`.
    Via(IpAddr),
    /// No route (or the lookup failed: the text says why).
    NoRoute(String),
}

/// A dsr-l2 backend the host does not reach on a link, with the sentence that says so.
pub fn problem(vip: &VipState, backend: SocketAddr) -> Option<String> {
    if vip.forwarding != Forwarding::DsrL2 {
        return None;
    }
    let how = match reach(backend.ip()) {
        Reach::OnLink => return None,
        Reach::Via(gateway) => format!("is reached through the gateway {gateway}"),
        Reach::NoRoute(why) => format!("has no route ({why})"),
    };
    Some(format!(
        "vip {}: dsr-l2 backend {backend} {how}, not on a link of this host: dsr-l2 sends each packet to the \
         backend's own MAC address, so the program would drop its packets (drop_backend_not_adjacent); put the \
         backend on the balancer's segment, or use forwarding \"dsr-ipip\" or \"dsr-gue\"",
        vip.label()
    ))
}

/// Every dsr-l2 backend of `state` the host does not reach on a link.
pub fn problems(state: &State) -> Vec<String> {
    state.vips.iter().flat_map(|v| v.backends.iter().filter_map(move |b| problem(v, b.address))).collect()
}

/// The kernel's answer to `ip route get ADDR`.
pub fn reach(addr: IpAddr) -> Reach {
    let lookup = async {
        let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| e.to_string())?;
        tokio::spawn(connection);
        let host = if addr.is_ipv4() { 32 } else { 128 };
        let query = RouteMessageBuilder::<IpAddr>::new().destination_prefix(addr, host).map_err(|e| e.to_string())?;
        let mut answers = handle.route().get(query.build()).execute();
        match answers.try_next().await {
            Ok(Some(route)) => Ok(route),
            Ok(None) => Err("no answer".to_string()),
            Err(e) => Err(e.to_string()),
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => return Reach::NoRoute(format!("no runtime for the lookup: {e}")),
    };
    // A thread of its own: the callers may be inside a runtime, where block_on panics.
    let answer = std::thread::scope(|s| s.spawn(|| runtime.block_on(lookup)).join());
    match answer {
        Ok(Ok(route)) => {
            let gateway = route.attributes.iter().find_map(|a| match a {
                RouteAttribute::Gateway(RouteAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
                RouteAttribute::Gateway(RouteAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
                _ => None,
            });
            match gateway {
                Some(g) => Reach::Via(g),
                None => Reach::OnLink,
            }
        }
        Ok(Err(why)) => Reach::NoRoute(why),
        Err(_) => Reach::NoRoute("the lookup failed".into()),
    }
}
