//! QUIC server ids in the map contents: only backends that may take connections (healthy, in
//! the ring with a weight) have their id routed; a drained, down or removed one falls back.
use std::path::Path;

use lb_common::quic::{QuicServerKey, VIP_QUIC};

use super::plan::{Applier, MapContents};
use super::*;
use crate::testing::SharedFake;

const QUIC_VIP: &str = r#"
[daemon]
ring_size = 251
[[vip]]
name = "h3"
address = "203.0.113.10"
port = 443
protocol = "udp"
quic = true
backends = [
  { address = "198.51.100.1", quic_server_id = 11 },
  { address = "198.51.100.2", quic_server_id = 12 },
  { address = "198.51.100.3" },
]
[[vip]]
name = "dns"
address = "203.0.113.10"
port = 53
protocol = "udp"
backends = [ { address = "198.51.100.4" } ]
"#;

fn ids(contents: &MapContents) -> Vec<(u32, u32, u32)> {
    contents.quic_servers.iter().map(|(k, b)| (k.vip_id, k.server_id, *b)).collect()
}

#[test]
fn only_backends_that_take_connections_have_their_server_id_routed() {
    let config = Config::parse(QUIC_VIP, Path::new("lb.toml")).unwrap();
    let mut state = State::from_config(&config, &State::default()).unwrap();
    let h3 = state.find_vip("h3").unwrap();
    let (vip, b1, b2) = (h3.id, h3.backends[0].id, h3.backends[1].id);
    let contents = MapContents::of(&state);
    assert_eq!(ids(&contents), [(vip, 11, b1), (vip, 12, b2)]);
    let flags: Vec<u8> = contents.vips.values().map(|i| i.flags).collect();
    assert!(flags.contains(&VIP_QUIC) && flags.contains(&0), "only the quic VIP is flagged: {flags:?}");

    let mut dp = SharedFake::default();
    let mut applier = Applier::default();
    applier.apply(&mut dp, &contents).unwrap();
    let key = |server_id| QuicServerKey { vip_id: vip, server_id };
    assert_eq!(dp.lock().fake.quic_servers.get(&key(11)), Some(&b1));

    state.drain_backend("h3", "198.51.100.1").unwrap();
    assert_eq!(ids(&MapContents::of(&state)), [(vip, 12, b2)], "drained: its id falls back");
    state.undrain_backend("h3", "198.51.100.1").unwrap();
    state.set_health(b2, Health::Down);
    let contents = MapContents::of(&state);
    assert_eq!(ids(&contents), [(vip, 11, b1)], "down: its id falls back");
    applier.apply(&mut dp, &contents).unwrap();
    assert_eq!(dp.lock().fake.quic_servers.get(&key(12)), None, "the map writer removed it");
    state.remove_backend("h3", "198.51.100.1").unwrap();
    let contents = MapContents::of(&state);
    assert!(ids(&contents).is_empty());
    applier.apply(&mut dp, &contents).unwrap();
    assert!(dp.lock().fake.quic_servers.is_empty());
}
