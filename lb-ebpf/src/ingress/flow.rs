//! A VIP packet's flow: its connection-table key, hash and way.
use lb_common::backend::Backend;
use lb_common::flow::{FlowEntry, FlowKey, FlowSlot};

use crate::table::Tables;

/// A VIP packet's flow: its key and table hash, its connection-table way if it has one, and
/// the tables (None until userspace configured them).
pub struct Flow<'a> {
    pub key: &'a FlowKey,
    pub hash: u32,
    pub slot: Option<*mut FlowSlot<FlowEntry>>,
    /// A NAT flow's packet checks its reply entry: the entry is marked lost, or this is the
    /// flow's first packet of the current reply-check period (`table::reply_check_due`).
    pub reply_check: bool,
    pub tables: Option<Tables>,
    /// The backend the packet's QUIC connection ID names (`quic::server`): it goes there,
    /// whatever the connection table and ring say.
    pub server: Option<(u32, &'static Backend)>,
}

impl Flow<'_> {
    /// The next-hop cache's generation (0 until userspace configured the tables): a cached
    /// next hop of another generation is looked up again.
    #[inline(always)]
    pub fn nexthop_generation(&self) -> u32 {
        self.tables.map_or(0, |t| t.nexthop_generation)
    }
}
