//! `[cluster]`: the other balancers of a scale-out group, for flow sharing (see `cluster/`).
use std::net::SocketAddr;
use std::path::Path;

use toml::Spanned;

use super::checker::Checker;
use super::raw::RawCluster;

/// Default of `cluster.max_messages_per_second`.
pub const DEFAULT_MAX_MESSAGES: u32 = 2000;
/// Shortest accepted shared key.
pub const MIN_KEY_BYTES: usize = 16;

/// `[cluster]`, checked.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSettings {
    /// Where this node receives the flows its peers place (UDP).
    pub listen: SocketAddr,
    /// The other nodes' `listen` addresses: where this node sends the flows it places, and
    /// the only sources it accepts flows from.
    pub peers: Vec<SocketAddr>,
    /// The shared secret every message is authenticated with (HMAC-SHA256).
    pub key: Vec<u8>,
    /// Messages accepted per second (more are refused and counted).
    pub max_messages_per_second: u32,
}

impl std::fmt::Debug for ClusterSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSettings")
            .field("listen", &self.listen)
            .field("peers", &self.peers)
            .field("key", &"(secret)")
            .field("max_messages_per_second", &self.max_messages_per_second)
            .finish()
    }
}

pub(super) fn cluster(c: &mut Checker<'_>, raw: &Spanned<RawCluster>, source: &Path) -> Option<ClusterSettings> {
    let r = raw.get_ref();
    let before = c.problems.len();
    let addr = |c: &mut Checker<'_>, s: &Spanned<String>, what: &str| match s.get_ref().parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            c.error(s.span(), format!("cluster: {what} {:?} is not ADDR:PORT", s.get_ref()));
            None
        }
    };
    let listen = addr(c, &r.listen, "listen");
    let peers: Vec<SocketAddr> = r.peers.iter().filter_map(|p| addr(c, p, "peer")).collect();
    if r.peers.is_empty() {
        c.error(raw.span(), "cluster: peers is empty (the other nodes' listen addresses)");
    }
    if let Some(l) = listen
        && peers.contains(&l)
    {
        c.error(r.listen.span(), "cluster: listen is one of the peers (list the other nodes only)");
    }
    // A relative key file is relative to the configuration file.
    let path = source.parent().unwrap_or(Path::new(".")).join(r.key_file.get_ref());
    let key = match std::fs::read(&path) {
        Ok(bytes) => {
            let key = String::from_utf8_lossy(&bytes).trim().as_bytes().to_vec();
            if key.len() < MIN_KEY_BYTES {
                c.error(
                    r.key_file.span(),
                    format!(
                        "cluster: key_file {} holds {} bytes; at least {MIN_KEY_BYTES} (e.g. `openssl rand -hex 32`)",
                        path.display(),
                        key.len()
                    ),
                );
            }
            key
        }
        Err(e) => {
            c.error(r.key_file.span(), format!("cluster: key_file {}: {e}", path.display()));
            Vec::new()
        }
    };
    let max_messages_per_second = match &r.max_messages_per_second {
        Some(m) => c.int(m, 1..=1_000_000, "cluster: max_messages_per_second").map(|m| m as u32),
        None => Some(DEFAULT_MAX_MESSAGES),
    };
    if c.problems.len() > before {
        return None;
    }
    Some(ClusterSettings { listen: listen?, peers, key, max_messages_per_second: max_messages_per_second? })
}
