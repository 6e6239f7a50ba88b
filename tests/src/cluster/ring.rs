//! The lab VIP's ring as the daemon builds it (the same code, from a configuration with the
//! same backends), so a scenario can choose source ports whose backend it knows before it
//! opens them. A scenario checks a few choices against a node's `lb-ctl explain`.
use std::net::{SocketAddr, SocketAddrV4};

use lb_common::flow::FlowKey;
use lb_common::hash::ring_slot;
use lb_ctl::state::{State, plan::ring_input};

use super::VIP;

/// The lab VIP's ring with backends `0..backends`, as backend addresses by slot.
pub struct RingModel {
    state: State,
    slots: Vec<SocketAddr>,
}

impl RingModel {
    /// The ring of [`super::scenario::web_vip`] with backends `0..backends`.
    pub fn web(backends: usize) -> RingModel {
        let text = super::scenario::web_vip(0, backends);
        let config = lb_ctl::config::Config::parse(&text, std::path::Path::new("lb.toml")).expect("ring configuration");
        RingModel::of(State::from_config(&config, &State::default()).expect("state"))
    }

    /// The same ring with `backend` removed.
    pub fn without(&self, backend: SocketAddr) -> RingModel {
        let mut state = self.state.clone();
        state.remove_backend("web", &backend.to_string()).expect("remove");
        RingModel::of(state)
    }

    fn of(state: State) -> RingModel {
        let v = &state.vips[0];
        let by_id = |id: u32| v.backends.iter().find(|b| b.id == id).expect("ring member").address;
        let slots = ring_input(v).build(state.ring_size).into_iter().map(by_id).collect();
        RingModel { state, slots }
    }

    /// The backend the ring gives a TCP flow from `client` to the VIP (it hashes the 5-tuple).
    pub fn backend_of(&self, client: SocketAddrV4) -> SocketAddr {
        let v = &self.state.vips[0];
        let (src, family) = lb_common::ip_bytes(std::net::IpAddr::V4(*client.ip()));
        let (dst, _) = lb_common::ip_bytes(VIP.into());
        let key = FlowKey::new(src, dst, client.port().to_be(), 80u16.to_be(), 6, family);
        self.slots[ring_slot(v.hash.wire(), &key, self.state.hash_seed, self.state.ring_size) as usize]
    }
}
