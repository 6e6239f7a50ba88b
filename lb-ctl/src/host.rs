//! What `attach` needs from the host, checked before anything is touched, each failure saying
//! the fix: the privileges to load XDP, and IP forwarding for the XDP VIPs (NAT and DSR packets
//! leave by `bpf_fib_lookup` on the ingress interface, which fails with forwarding off there:
//! every new flow dropped as drop_no_route, no warning).
use std::path::PathBuf;

use anyhow::{Context as _, bail};

use crate::config::Config;

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

/// Loading the program and its maps needs CAP_BPF (or CAP_SYS_ADMIN, which older kernels ask
/// for) and attaching it CAP_NET_ADMIN.
pub fn check_privileges() -> anyhow::Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let effective = effective_capabilities(&status).context("no CapEff in /proc/self/status")?;
    let has = |cap: u32| effective & (1 << cap) != 0;
    if !has(CAP_NET_ADMIN) || !(has(CAP_BPF) || has(CAP_SYS_ADMIN)) {
        bail!("lb-ctl attach needs root (CAP_BPF and CAP_NET_ADMIN): run it with sudo");
    }
    Ok(())
}

/// The effective capability set from the text of /proc/self/status.
pub fn effective_capabilities(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// A forwarding switch: the sysctl name and its file in this network namespace.
struct Switch {
    name: String,
    file: PathBuf,
}

impl Switch {
    fn global(name: &str, path: &str) -> Switch {
        Switch { name: name.into(), file: PathBuf::from("/proc/sys/net").join(path) }
    }

    fn interface(family: &str, iface: &str) -> Switch {
        let name = format!("net.{family}.conf.{iface}.forwarding");
        Switch { name, file: PathBuf::from(format!("/proc/sys/net/{family}/conf/{iface}/forwarding")) }
    }

    fn is_on(&self) -> anyhow::Result<bool> {
        let text = std::fs::read_to_string(&self.file).with_context(|| format!("reading {}", self.file.display()))?;
        Ok(text.trim() != "0")
    }
}

/// The switches the XDP VIPs of `config` need on `iface`: IPv4's global one, then the
/// interface's own, which the FIB lookup reads (writing the global one sets it); and when a
/// VIP routes anything over IPv6 (an IPv6 VIP, backend or encap_source), the interface's IPv6
/// switch, which the IPv6 FIB lookup reads (only the interface's: the global
/// net.ipv6.conf.all.forwarding would change every interface's handling of router
/// advertisements).
fn switches(config: &Config, iface: &str) -> Vec<Switch> {
    // An interface that is not in this namespace has nothing to forward (attach then fails on
    // it; the in-memory test mode runs on made-up names).
    if !PathBuf::from(format!("/proc/sys/net/ipv4/conf/{iface}")).exists() {
        return Vec::new();
    }
    if !config.vips.iter().any(|v| v.forwarding.is_xdp()) {
        return Vec::new();
    }
    let mut out = vec![Switch::global("net.ipv4.ip_forward", "ipv4/ip_forward"), Switch::interface("ipv4", iface)];
    if needs_ipv6(config) && PathBuf::from(format!("/proc/sys/net/ipv6/conf/{iface}")).exists() {
        out.push(Switch::interface("ipv6", iface));
    }
    out
}

/// Whether an XDP VIP of `config` has its packets routed over IPv6.
fn needs_ipv6(config: &Config) -> bool {
    config.vips.iter().filter(|v| v.forwarding.is_xdp()).any(|v| {
        v.address.is_ipv6()
            || v.encap_source.is_some_and(|s| s.is_ipv6())
            || v.backends.iter().any(|b| b.address.is_ipv6())
    })
}

/// The first forwarding switch that is off although the XDP VIPs of `config` need it.
pub fn forwarding_off(config: &Config, iface: &str) -> anyhow::Result<Option<String>> {
    for switch in switches(config, iface) {
        if !switch.is_on()? {
            return Ok(Some(switch.name));
        }
    }
    Ok(None)
}

/// Fails if the XDP VIPs would have their packets dropped for forwarding being off; with `enable`,
/// turns forwarding on instead (in this network namespace).
pub fn check_forwarding(config: &Config, iface: &str, enable: bool) -> anyhow::Result<()> {
    for switch in switches(config, iface) {
        if switch.is_on()? {
            continue;
        }
        if enable {
            std::fs::write(&switch.file, "1").with_context(|| format!("setting {}=1", switch.name))?;
            tracing::info!("set {}=1 (--enable-forwarding)", switch.name);
            continue;
        }
        let ra = if switch.name.starts_with("net.ipv6") {
            " (with IPv6 forwarding on, the interface ignores router advertisements unless its \
             accept_ra is 2)"
        } else {
            ""
        };
        bail!(
            "{}=0: new flows of the NAT and DSR VIPs would be dropped (no route). Turn it on with \
             `sysctl -w {}=1` (or pass --enable-forwarding), then attach again{ra}",
            switch.name,
            switch.name
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_forwarding_is_needed_when_a_vip_routes_over_ipv6() {
        let parse = |vip: &str| Config::parse(vip, std::path::Path::new("lb.toml")).unwrap_or_else(|e| panic!("{e}"));
        let v4 = "[[vip]]\naddress = \"203.0.113.10\"\nport = 80\nbackends = [ { address = \"198.51.100.1\" } ]\n";
        assert!(!needs_ipv6(&parse(v4)));
        let v6 = "[[vip]]\naddress = \"2001:db8::10\"\nport = 80\nbackends = [ { address = \"2001:db8::11\" } ]\n";
        assert!(needs_ipv6(&parse(v6)));
        let underlay = "[[vip]]\naddress = \"203.0.113.10\"\nport = 80\nforwarding = \"dsr-ipip\"\nencap_source = \"2001:db8::fe\"\n";
        assert!(needs_ipv6(&parse(underlay)));
        let proxy = "[[vip]]\naddress = \"2001:db8::10\"\nport = 80\nforwarding = \"proxy\"\n";
        assert!(!needs_ipv6(&parse(proxy)), "the proxy's sockets need no forwarding");
    }

    #[test]
    fn effective_capabilities_are_read_from_the_status_text() {
        let status = "Name:\tlb-ctl\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(effective_capabilities(status), Some(0x1ff_ffff_ffff));
        assert_eq!(
            effective_capabilities("CapEff:\t0000000000001000\n").map(|c| c & (1 << CAP_NET_ADMIN)),
            Some(1 << 12)
        );
        assert_eq!(effective_capabilities("Name:\tx\n"), None);
    }
}
