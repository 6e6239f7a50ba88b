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

/// The switches the XDP VIPs of `config` need on `iface` (the data plane routes IPv4): the
/// global one, then the interface's own, which the FIB lookup reads (writing the global one
/// sets it).
fn switches(config: &Config, iface: &str) -> Vec<Switch> {
    // An interface that is not in this namespace has nothing to forward (attach then fails on
    // it; the in-memory test mode runs on made-up names).
    if !PathBuf::from(format!("/proc/sys/net/ipv4/conf/{iface}")).exists() {
        return Vec::new();
    }
    if !config.vips.iter().any(|v| v.forwarding.is_xdp()) {
        return Vec::new();
    }
    vec![Switch::global("net.ipv4.ip_forward", "ipv4/ip_forward"), Switch::interface("ipv4", iface)]
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
        bail!(
            "{}=0: new flows of the NAT and DSR VIPs would be dropped (no route). Turn it on with \
             `sysctl -w {}=1` (or pass --enable-forwarding), then attach again",
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
