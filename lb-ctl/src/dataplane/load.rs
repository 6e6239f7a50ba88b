//! Loading the XDP objects and attaching them to interfaces.
use std::path::{Path, PathBuf};

use aya::maps::ProgramArray;
use aya::maps::lpm_trie::{Key, LpmTrie};
use aya::programs::{Xdp, XdpMode, xdp::XdpLinkId};
use aya::{Ebpf, EbpfLoader};
use ipnet::IpNet;
use lb_common::flow::flow_sets;
use lb_common::limits::{DEFAULT_FLOWS, DEFAULT_RING_SIZE, MAX_VIPS};
use lb_common::map_names;

use super::{DataplaneError, Result, messages, objects};

/// The maps the balancer keeps across restarts when pinned: all of them, so a restarted daemon
/// finds the connection table, rings and counters as they were.
pub const PINNED_MAPS: &[&str] = &[
    map_names::VIPS,
    map_names::VIP_INFO,
    map_names::BACKENDS,
    map_names::RINGS,
    map_names::FLOWS,
    map_names::REVERSE_FLOWS,
    map_names::PORT_FLAGS,
    map_names::CONFIG,
    map_names::COUNTERS,
    map_names::VIP_STATS,
    map_names::BACKEND_STATS,
    map_names::NAT_BACKENDS,
    map_names::QUIC_SERVERS,
];

/// How to load the balancer.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// bpffs directory to pin the maps in and reuse them from; None: private maps.
    pub pin_dir: Option<PathBuf>,
    /// Slots per VIP ring (prime).
    pub ring_size: u32,
    /// Connection-table entries (flows; the tables hold `flow_sets` of it in sets).
    pub flow_table_size: u32,
    /// Maps made anew even though pinned (an older layout being migrated): not opened from
    /// their pins.
    pub fresh: Vec<&'static str>,
    /// The program makes its debug messages (`messages`): fixed for the program's life.
    pub debug_messages: bool,
    /// An lb_ingress object to load in place of the one built in (benchmarks: an earlier build
    /// measured against this one); None: the built-in object.
    pub object: Option<&'static [u8]>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            pin_dir: None,
            ring_size: DEFAULT_RING_SIZE,
            flow_table_size: DEFAULT_FLOWS,
            fresh: Vec::new(),
            debug_messages: false,
            object: None,
        }
    }
}

fn load_error(what: &str, err: impl std::fmt::Display) -> DataplaneError {
    DataplaneError::Load(format!("{what}: {err}"))
}

fn check_objects() -> Result<()> {
    if objects::available() {
        Ok(())
    } else {
        Err(DataplaneError::Load("this lb-ctl was built without its XDP programs (AYA_BUILD_SKIP); rebuild it".into()))
    }
}

/// Loads the balancer object and its program into the kernel (not attached yet).
pub fn load_ingress(options: &LoadOptions) -> Result<Ebpf> {
    check_objects()?;
    let rings = MAX_VIPS.checked_mul(options.ring_size).ok_or_else(|| load_error("ring size", "too large"))?;
    let pin_paths: Vec<(&str, PathBuf)> = match &options.pin_dir {
        Some(dir) => PINNED_MAPS
            .iter()
            .filter(|name| !options.fresh.contains(name))
            .map(|name| (*name, dir.join(name)))
            .collect(),
        None => Vec::new(),
    };
    if let Some(dir) = &options.pin_dir {
        std::fs::create_dir_all(dir).map_err(|e| load_error(&format!("creating {}", dir.display()), e))?;
    }
    let mut loader = EbpfLoader::new();
    let level = messages::level(options.debug_messages);
    loader
        .override_global(messages::LEVEL_GLOBAL, &level, true)
        .map_max_entries(map_names::RINGS, rings)
        .map_max_entries(map_names::FLOWS, flow_sets(options.flow_table_size))
        .map_max_entries(map_names::REVERSE_FLOWS, flow_sets(options.flow_table_size));
    for (name, path) in &pin_paths {
        loader.map_pin_path(name, path.as_path());
    }
    let mut ebpf =
        loader.load(options.object.unwrap_or(objects::INGRESS)).map_err(|e| load_error("loading lb_ingress", e))?;
    program(&mut ebpf, lb_common::program_names::INGRESS)?.load().map_err(|e| load_error("verifying lb_ingress", e))?;
    fill_jumps(&mut ebpf)?;
    Ok(ebpf)
}

/// The programs lb_ingress hands packets on to (IPv6, ICMP errors, IPv6 encapsulation), each
/// loaded and put at its `lb_common::jumps` index of JUMPS. Not pinned: a restarted daemon
/// loads and fills its own.
fn fill_jumps(ebpf: &mut Ebpf) -> Result<()> {
    use lb_common::{jumps, program_names};
    let mut fds = Vec::new();
    for (index, name) in [
        (jumps::IPV6, program_names::INGRESS_V6),
        (jumps::ICMP_ERRORS, program_names::ICMP_ERRORS),
        (jumps::TOO_BIG6, program_names::TOO_BIG6),
        (jumps::ICMP6_ERRORS, program_names::ICMP6_ERRORS),
        (jumps::TRACE, program_names::TRACE),
    ] {
        let prog = program(ebpf, name)?;
        prog.load().map_err(|e| load_error(&format!("verifying {name}"), e))?;
        let fd = prog.fd().map_err(|e| load_error(name, e))?.try_clone().map_err(|e| load_error(name, e))?;
        fds.push((index, fd));
    }
    let name = map_names::JUMPS;
    let map = ebpf.map_mut(name).ok_or_else(|| load_error(name, "no such map in the object"))?;
    let mut table = ProgramArray::try_from(map).map_err(|e| load_error(name, e))?;
    for (index, fd) in &fds {
        table.set(*index, fd, 0).map_err(|e| load_error(&format!("{name}[{index}]"), e))?;
    }
    Ok(())
}

/// Loads the decapsulation object with both its programs (`lb_decap`, `lb_pass`).
pub fn load_decap() -> Result<Ebpf> {
    check_objects()?;
    let mut ebpf = Ebpf::load(objects::DECAP).map_err(|e| load_error("loading lb-decap", e))?;
    for name in [lb_common::program_names::DECAP, lb_common::program_names::PASS] {
        program(&mut ebpf, name)?.load().map_err(|e| load_error(name, e))?;
    }
    Ok(ebpf)
}

/// Lets the loaded decapsulator open encapsulated packets from outer sources in `prefixes`
/// (and only those): IPv4 prefixes go to DECAP_SOURCES, IPv6 ones to DECAP_SOURCES6. The
/// IPv6 map is only opened when there is an IPv6 prefix to write.
pub fn allow_decap_sources(ebpf: &mut Ebpf, prefixes: &[IpNet]) -> Result<()> {
    let (v4, v6) = decap_keys(prefixes);
    if !v4.is_empty() {
        allow_in::<4>(ebpf, lb_common::map_names::DECAP_SOURCES, &v4)?;
    }
    if !v6.is_empty() {
        allow_in::<16>(ebpf, lb_common::map_names::DECAP_SOURCES6, &v6)?;
    }
    Ok(())
}

/// An LPM trie key: prefix length and address bytes.
type LpmKey<const N: usize> = (u32, [u8; N]);

/// The LPM keys (prefix length, address with the host bits cleared) of `prefixes`: IPv4's for
/// DECAP_SOURCES, IPv6's for DECAP_SOURCES6.
fn decap_keys(prefixes: &[IpNet]) -> (Vec<LpmKey<4>>, Vec<LpmKey<16>>) {
    let v4: Vec<LpmKey<4>> = prefixes
        .iter()
        .filter_map(|p| match p.trunc() {
            IpNet::V4(n) => Some((n.prefix_len().into(), n.addr().octets())),
            IpNet::V6(_) => None,
        })
        .collect();
    let v6: Vec<LpmKey<16>> = prefixes
        .iter()
        .filter_map(|p| match p.trunc() {
            IpNet::V6(n) => Some((n.prefix_len().into(), n.addr().octets())),
            IpNet::V4(_) => None,
        })
        .collect();
    (v4, v6)
}

/// Writes `prefixes` (length, address) into the LPM trie `name` (value 1: allowed).
fn allow_in<const N: usize>(ebpf: &mut Ebpf, name: &str, prefixes: &[LpmKey<N>]) -> Result<()>
where
    [u8; N]: aya::Pod,
{
    let map = ebpf.map_mut(name).ok_or_else(|| {
        load_error(name, "no such map in the object (an lb-decap built before this address family was supported?)")
    })?;
    let mut trie: LpmTrie<_, [u8; N], u8> = LpmTrie::try_from(map).map_err(|e| load_error(name, e))?;
    for (len, addr) in prefixes {
        trie.insert(&Key::new(*len, *addr), 1, 0).map_err(|e| load_error(&format!("{name}: {addr:?}/{len}"), e))?;
    }
    Ok(())
}

/// An XDP program of a loaded object.
pub fn program<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Xdp> {
    ebpf.program_mut(name)
        .ok_or_else(|| load_error(name, "no such program in the object"))?
        .try_into()
        .map_err(|e| load_error(name, e))
}

/// Attach mode requested by the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// Driver mode only.
    Native,
    /// Generic (skb) mode only.
    Skb,
    /// Native, falling back to skb mode when the driver refuses.
    Auto,
}

/// An attachment made by [`attach`].
pub struct Attached {
    /// The mode the program got.
    pub mode: XdpMode,
    /// Auto mode's fallback: why native mode was refused.
    pub native_refused: Option<String>,
    /// The link, owned by the program until taken.
    pub link: XdpLinkId,
}

/// Attaches program `name` of `ebpf` to `iface`.
pub fn attach(ebpf: &mut Ebpf, name: &str, iface: &str, mode: AttachMode) -> Result<Attached> {
    let prog = program(ebpf, name)?;
    let try_mode = |prog: &mut Xdp, mode: XdpMode| {
        prog.attach(iface, mode).map_err(|e| {
            let label = if mode == XdpMode::Skb { "skb" } else { "native" };
            load_error(&format!("attaching {name} to {iface} ({label})"), e)
        })
    };
    let (mode, native_refused, link) = match mode {
        AttachMode::Native => (XdpMode::Driver, None, try_mode(prog, XdpMode::Driver)?),
        AttachMode::Skb => (XdpMode::Skb, None, try_mode(prog, XdpMode::Skb)?),
        AttachMode::Auto => match try_mode(prog, XdpMode::Driver) {
            Ok(link) => (XdpMode::Driver, None, link),
            Err(native) => (XdpMode::Skb, Some(native.to_string()), try_mode(prog, XdpMode::Skb)?),
        },
    };
    Ok(Attached { mode, native_refused, link })
}

/// Removes the pinned maps of a balancer (after `detach`); returns how many there were.
pub fn remove_pins(dir: &Path) -> std::io::Result<usize> {
    // The layout record and maps a migration left staged go with them, uncounted.
    for name in PINNED_MAPS {
        let _ = std::fs::remove_file(super::migrate::staged_path(dir, name));
    }
    let _ = std::fs::remove_file(dir.join(super::layout::HEADER));
    let mut removed = 0;
    for name in PINNED_MAPS {
        match std::fs::remove_file(dir.join(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            Err(_) => {}
            Ok(()) => removed += 1,
        }
    }
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(removed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decap_sources_go_to_the_map_of_their_family() {
        let prefixes: Vec<IpNet> = ["198.51.100.7/24", "2001:db8:1::fe/128", "2001:db8:2::1/48", "0.0.0.0/0"]
            .map(|p| p.parse().unwrap())
            .into();
        let (v4, v6) = decap_keys(&prefixes);
        assert_eq!(v4, [(24, [198, 51, 100, 0]), (0, [0; 4])]);
        let addr = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
        assert_eq!(v6, [(128, addr("2001:db8:1::fe")), (48, addr("2001:db8:2::"))]);
    }
}
