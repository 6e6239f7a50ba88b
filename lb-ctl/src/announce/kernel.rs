//! Announced routes in a kernel routing table, over netlink: host routes on `lo` (only the
//! routing daemon reads the table; no policy rule sends traffic through it).
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures_util::TryStreamExt as _;
use rtnetlink::packet_route::route::{RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope};
use rtnetlink::{Handle, RouteMessageBuilder};

use super::{Change, ROUTE_PROTOCOL, Routes};

pub struct KernelRoutes {
    table: u32,
    lo: u32,
    handle: Handle,
    runtime: tokio::runtime::Handle,
    set: BTreeSet<IpAddr>,
}

impl KernelRoutes {
    /// Opens netlink and reads what a previous run left in `table` (its routes are kept or
    /// withdrawn by the first [`Routes::apply`]). Called within `runtime`, outside its tasks.
    pub fn open(table: u32, runtime: tokio::runtime::Handle) -> std::io::Result<KernelRoutes> {
        let (connection, handle, _) = runtime.block_on(async { rtnetlink::new_connection() })?;
        runtime.spawn(connection);
        // SAFETY: if_nametoindex reads a NUL-terminated name.
        let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        if lo == 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut routes = KernelRoutes { table, lo, handle, runtime, set: BTreeSet::new() };
        routes.set = routes.read()?;
        Ok(routes)
    }

    /// The host routes of our protocol in the table, both families.
    fn read(&self) -> std::io::Result<BTreeSet<IpAddr>> {
        let (handle, table) = (self.handle.clone(), self.table);
        self.runtime.block_on(async move {
            let mut found = BTreeSet::new();
            let queries =
                [RouteMessageBuilder::<Ipv4Addr>::new().build(), RouteMessageBuilder::<Ipv6Addr>::new().build()];
            for query in queries {
                let mut routes = handle.route().get(query).execute();
                while let Some(route) = routes.try_next().await.map_err(std::io::Error::other)? {
                    if ours(&route, table)
                        && let Some(ip) = destination(&route)
                    {
                        found.insert(ip);
                    }
                }
            }
            Ok(found)
        })
    }

    fn message(&self, ip: IpAddr) -> RouteMessage {
        let protocol = RouteProtocol::Other(ROUTE_PROTOCOL);
        match ip {
            IpAddr::V4(v4) => RouteMessageBuilder::<Ipv4Addr>::new()
                .destination_prefix(v4, 32)
                .output_interface(self.lo)
                .table_id(self.table)
                .protocol(protocol)
                .scope(RouteScope::Link)
                .build(),
            IpAddr::V6(v6) => RouteMessageBuilder::<Ipv6Addr>::new()
                .destination_prefix(v6, 128)
                .output_interface(self.lo)
                .table_id(self.table)
                .protocol(protocol)
                .build(),
        }
    }
}

/// Whether `route` is one of ours in `table`.
fn ours(route: &RouteMessage, table: u32) -> bool {
    let in_table = route
        .attributes
        .iter()
        .find_map(|a| if let RouteAttribute::Table(t) = a { Some(*t) } else { None })
        .unwrap_or(u32::from(route.header.table));
    in_table == table && route.header.protocol == RouteProtocol::Other(ROUTE_PROTOCOL)
}

fn destination(route: &RouteMessage) -> Option<IpAddr> {
    route.attributes.iter().find_map(|a| match a {
        RouteAttribute::Destination(RouteAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
        RouteAttribute::Destination(RouteAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
        _ => None,
    })
}

impl Routes for KernelRoutes {
    fn apply(&mut self, want: &BTreeSet<IpAddr>) -> Result<Change, String> {
        let change = Change {
            announced: want.difference(&self.set).copied().collect(),
            withdrawn: self.set.difference(want).copied().collect(),
        };
        for ip in &change.announced {
            let add = self.handle.route().add(self.message(*ip)).replace().execute();
            self.runtime.block_on(add).map_err(|e| format!("announcing {ip} (route in table {}): {e}", self.table))?;
            self.set.insert(*ip);
        }
        for ip in &change.withdrawn {
            let del = self.handle.route().del(self.message(*ip)).execute();
            match self.runtime.block_on(del) {
                Ok(()) => {}
                // Already gone (removed by hand): withdrawn all the same.
                Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::ESRCH => {}
                Err(e) => return Err(format!("withdrawing {ip} (route in table {}): {e}", self.table)),
            }
            self.set.remove(ip);
        }
        Ok(change)
    }

    fn announced(&self) -> BTreeSet<IpAddr> {
        self.set.clone()
    }

    fn reread(&mut self) -> Result<(), String> {
        self.set = self.read().map_err(|e| format!("reading routing table {}: {e}", self.table))?;
        Ok(())
    }
}
