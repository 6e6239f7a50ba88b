//! `lb-ctl backend-setup`: what a DSR backend needs, printed as a script, applied, or checked
//! on the backend itself. A DSR backend answers clients straight from the VIP, so it must hold
//! the VIP (on `lo`, where it answers no ARP), must not announce it, must accept packets whose
//! source is a client it has no route back to through the tunnel, and must remove the IPIP
//! header. Most "it does not forward" reports of DSR balancers are one of these missing.
//!
//! IPv6 VIPs differ: IPv6 has no ARP (Linux answers a neighbour solicitation only for an
//! address of the interface it arrives on, so a VIP on `lo` is not advertised on other links),
//! and there is no IPv6 rp_filter sysctl; the ARP and reverse-path steps are for IPv4 VIPs.
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, bail};
use ipnet::IpNet;

use super::args::DsrMode;

/// One thing the backend needs: how to check it, and the command that makes it so.
struct Step {
    what: String,
    why: &'static str,
    command: Vec<String>,
    check: Check,
}

enum Check {
    /// The address is on `lo`.
    OnLoopback(IpAddr),
    /// A sysctl under /proc/sys holds one of the accepted values.
    Sysctl { key: String, accepted: &'static [&'static str] },
    /// The decapsulator is attached (pinned) on the interface.
    Decap(String),
}

fn steps(iface: &str, vips: &[IpAddr], from: &[IpNet], mode: DsrMode) -> Vec<Step> {
    let mut out = Vec::new();
    for vip in vips {
        let lo = |s: &[&str]| s.iter().map(|w| w.to_string()).collect::<Vec<String>>();
        out.push(match vip {
            IpAddr::V4(_) => Step {
                what: format!("VIP {vip} on lo"),
                why: "the backend answers from the VIP, and holds it where it answers no ARP",
                command: lo(&["ip", "addr", "replace", &format!("{vip}/32"), "dev", "lo"]),
                check: Check::OnLoopback(*vip),
            },
            IpAddr::V6(_) => Step {
                what: format!("VIP {vip} on lo"),
                why: "the backend answers from the VIP; IPv6 has no ARP, and an address on lo is not advertised on other links (no neighbour advertisement for it; nodad: no duplicate-address probe)",
                command: lo(&["ip", "-6", "addr", "replace", &format!("{vip}/128"), "dev", "lo", "nodad"]),
                check: Check::OnLoopback(*vip),
            },
        });
    }
    if !vips.iter().any(IpAddr::is_ipv4) {
        // ARP and rp_filter are IPv4's: nothing else to set for IPv6 VIPs but the decapsulator.
        return decap_step(out, iface, from, mode);
    }
    let sysctl = |key: String, value: &str, accepted: &'static [&'static str], why| Step {
        what: format!("{key} = {value}"),
        why,
        command: vec!["sysctl".into(), "-qw".into(), format!("{key}={value}")],
        check: Check::Sysctl { key, accepted },
    };
    for scope in ["all".to_string(), iface.to_string()] {
        out.push(sysctl(
            format!("net.ipv4.conf.{scope}.arp_ignore"),
            "1",
            &["1", "2", "3"],
            "answer ARP only for addresses of the receiving interface: never for the VIP on lo",
        ));
        out.push(sysctl(
            format!("net.ipv4.conf.{scope}.arp_announce"),
            "2",
            &["2"],
            "never use the VIP as the source of ARP requests",
        ));
        if mode != DsrMode::L2 {
            out.push(sysctl(
                format!("net.ipv4.conf.{scope}.rp_filter"),
                "2",
                &["0", "2"],
                "decapsulated packets come from clients: strict reverse-path filtering may drop them",
            ));
        }
    }
    decap_step(out, iface, from, mode)
}

/// `out` and, unless the mode is dsr-l2, the decapsulator.
fn decap_step(mut out: Vec<Step>, iface: &str, from: &[IpNet], mode: DsrMode) -> Vec<Step> {
    if mode == DsrMode::L2 {
        return out;
    }
    let mut decap = vec!["lb-ctl".to_string(), "decap".into(), "attach".into(), iface.to_string()];
    for prefix in from {
        decap.push("--from".into());
        decap.push(prefix.to_string());
    }
    if from.is_empty() {
        decap.extend(["--from".into(), "BALANCER_ENCAP_SOURCE".into()]);
    }
    out.push(Step {
        what: format!("decapsulator (IPIP and GUE) on {iface}"),
        why: "removes the balancer's outer headers (only from the balancers' addresses given with --from)",
        command: decap,
        check: Check::Decap(iface.to_string()),
    });
    out
}

/// The script a backend runs (what `--apply` does).
pub fn script(iface: &str, vips: &[IpAddr], from: &[IpNet], mode: DsrMode) -> String {
    let vip_list: Vec<String> = vips.iter().map(IpAddr::to_string).collect();
    let mut out = match mode {
        DsrMode::Ipip | DsrMode::Gue => format!(
            "#!/bin/sh\n# A DSR ({}) backend of {} behind balancers {}: run as root on the backend.\nset -e\n",
            if mode == DsrMode::Gue { "GUE" } else { "IPIP" },
            vip_list.join(", "),
            from.iter().map(IpNet::to_string).collect::<Vec<_>>().join(", ")
        ),
        DsrMode::L2 => format!(
            "#!/bin/sh\n# A DSR (by MAC) backend of {} on the balancers' segment: run as root on the backend.\nset -e\n",
            vip_list.join(", ")
        ),
    };
    for s in steps(iface, vips, from, mode) {
        out.push_str(&format!("# {}: {}\n{}\n", s.what, s.why, s.command.join(" ")));
    }
    if vips.iter().any(IpAddr::is_ipv6) {
        out.push_str(
            "# IPv6 VIPs: IPv6 has no ARP, so arp_ignore and arp_announce (IPv4 only) do not apply to them;\n\
             # Linux answers neighbour solicitations only for addresses of the interface they arrive on, so\n\
             # the VIP on lo is not advertised on other links (dsr-l2 needs exactly that).\n",
        );
        if mode != DsrMode::L2 {
            out.push_str(
                "# rp_filter is IPv4 only: IPv6 has no reverse-path sysctl (an ip6tables/nft rpfilter rule, if\n\
                 # this host has one, must let the decapsulated packets from clients through).\n",
            );
        }
    }
    if mode == DsrMode::L2 {
        out.push_str(
            "# Segment: the balancers send VIP packets unchanged to this host's MAC address, so it must be\n\
             # on their L2 segment (a neighbour, no router between); no MTU change is needed.\n",
        );
        return out;
    }
    // The outer header is of the balancers' (encap_source's) family: 20 bytes for IPv4, 40 for
    // IPv6; GUE adds its UDP header.
    let outer = if from.iter().any(|p| matches!(p, IpNet::V6(_))) { 40 } else { 20 };
    let (name, bytes) = if mode == DsrMode::Gue { ("GUE", outer + 8) } else { ("IPIP", outer) };
    out.push_str(&format!(
        "# MTU: {name} adds {bytes} bytes on the way from the balancer to this backend. Give that link an MTU\n\
         # {bytes} bytes larger than the clients' (e.g. {}), or the balancer answers full-size packets\n\
         # with ICMP \"fragmentation needed\" (ICMPv6 \"packet too big\") and clients lower their path\n\
         # MTU (it works, at a cost).\n",
        1500 + bytes
    ));
    out
}

fn holds(check: &Check) -> anyhow::Result<bool> {
    Ok(match check {
        Check::OnLoopback(vip) => {
            let (family, len) = if vip.is_ipv4() { ("-4", 32) } else { ("-6", 128) };
            let out =
                Command::new("ip").args([family, "-o", "addr", "show", "dev", "lo"]).output().context("ip addr")?;
            String::from_utf8_lossy(&out.stdout).split_whitespace().any(|w| w == format!("{vip}/{len}"))
        }
        Check::Sysctl { key, accepted } => {
            let path = Path::new("/proc/sys").join(key.replace('.', "/"));
            let value = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            accepted.contains(&value.trim())
        }
        Check::Decap(iface) => crate::dataplane::attach::decap_attached(iface),
    })
}

/// Checks each step on this host: prints what holds and what is missing (with its command);
/// true when everything holds.
pub fn check(iface: &str, vips: &[IpAddr], from: &[IpNet], mode: DsrMode) -> anyhow::Result<bool> {
    let mut all = true;
    for s in steps(iface, vips, from, mode) {
        if holds(&s.check)? {
            println!("ok       {}", s.what);
        } else {
            all = false;
            println!("MISSING  {}: {}\n         fix: {}", s.what, s.why, s.command.join(" "));
        }
    }
    Ok(all)
}

/// Makes every step hold on this host (as root): runs the commands of those that do not.
pub fn apply(iface: &str, vips: &[IpAddr], from: &[IpNet], mode: DsrMode) -> anyhow::Result<()> {
    if from.is_empty() && mode != DsrMode::L2 {
        bail!("--apply needs --from (the balancers' encap_source addresses) for the decapsulator");
    }
    for s in steps(iface, vips, from, mode) {
        if holds(&s.check)? {
            println!("ok       {}", s.what);
            continue;
        }
        let mut command = s.command.clone();
        if command[0] == "lb-ctl" {
            command[0] = std::env::current_exe()?.display().to_string();
        }
        let status = Command::new(&command[0])
            .args(&command[1..])
            .status()
            .with_context(|| format!("running {}", command.join(" ")))?;
        if !status.success() {
            bail!("{} failed ({status})", s.command.join(" "));
        }
        println!("applied  {}", s.what);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_names_every_step_with_its_reason() {
        let text =
            script("eth1", &["203.0.113.20".parse().unwrap()], &["198.51.100.0/29".parse().unwrap()], DsrMode::Ipip);
        for line in [
            "ip addr replace 203.0.113.20/32 dev lo",
            "sysctl -qw net.ipv4.conf.all.arp_ignore=1",
            "sysctl -qw net.ipv4.conf.eth1.arp_announce=2",
            "sysctl -qw net.ipv4.conf.eth1.rp_filter=2",
            "lb-ctl decap attach eth1 --from 198.51.100.0/29",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        // Every command comes after a comment saying why.
        let lines: Vec<&str> = text.lines().skip(3).collect();
        for pair in lines.chunks(2).take(8) {
            assert!(pair[0].starts_with("# ") && !pair[1].starts_with('#'), "{pair:?}");
        }
        let without_from = script("eth0", &["203.0.113.20".parse().unwrap()], &[], DsrMode::Ipip);
        assert!(without_from.contains("--from BALANCER_ENCAP_SOURCE"), "{without_from}");
    }

    #[test]
    fn an_l2_backend_needs_no_decapsulator() {
        let text = script("eth0", &["203.0.113.21".parse().unwrap()], &[], DsrMode::L2);
        assert!(text.contains("ip addr replace 203.0.113.21/32 dev lo"), "{text}");
        assert!(text.contains("net.ipv4.conf.all.arp_ignore=1"), "{text}");
        assert!(!text.contains("decap") && !text.contains("rp_filter"), "{text}");
        assert!(text.contains("on their L2 segment"), "{text}");
    }

    #[test]
    fn an_ipv6_vip_gets_ipv6_steps() {
        let text =
            script("eth1", &["2001:db8::10".parse().unwrap()], &["2001:db8:1::fe/128".parse().unwrap()], DsrMode::Ipip);
        for line in
            ["ip -6 addr replace 2001:db8::10/128 dev lo nodad", "lb-ctl decap attach eth1 --from 2001:db8:1::fe/128"]
        {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        // No ARP and no rp_filter for IPv6, and the script says why.
        assert!(
            !text.contains("arp_ignore=") && !text.contains("arp_announce=") && !text.contains("rp_filter="),
            "{text}"
        );
        assert!(text.contains("IPv6 has no ARP"), "{text}");
        assert!(text.contains("# rp_filter is IPv4 only"), "{text}");
        assert!(text.contains("not advertised on other links"), "{text}");
        // The outer header is IPv6: 40 bytes.
        assert!(text.contains("IPIP adds 40 bytes"), "{text}");
        // The check looks for the /128 on lo.
        let s = steps("eth1", &["2001:db8::10".parse().unwrap()], &[], DsrMode::Gue);
        assert!(matches!(s[0].check, Check::OnLoopback(IpAddr::V6(_))));
        assert_eq!(s.len(), 2, "the VIP and the decapsulator");
    }

    #[test]
    fn dual_stack_and_l2_ipv6_backends() {
        let vips: Vec<IpAddr> = vec!["203.0.113.20".parse().unwrap(), "2001:db8::10".parse().unwrap()];
        let from: Vec<IpNet> = vec!["198.51.100.1".parse::<IpAddr>().unwrap().into()];
        let text = script("eth1", &vips, &from, DsrMode::Gue);
        for line in [
            "ip addr replace 203.0.113.20/32 dev lo",
            "ip -6 addr replace 2001:db8::10/128 dev lo nodad",
            "sysctl -qw net.ipv4.conf.eth1.arp_ignore=1",
            "sysctl -qw net.ipv4.conf.eth1.rp_filter=2",
            "lb-ctl decap attach eth1 --from 198.51.100.1/32",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        assert!(text.contains("GUE adds 28 bytes"), "{text}");
        let l2 = script("eth0", &["2001:db8::21".parse().unwrap()], &[], DsrMode::L2);
        assert!(l2.contains("ip -6 addr replace 2001:db8::21/128 dev lo nodad"), "{l2}");
        assert!(!l2.contains("decap") && !l2.contains("arp_ignore="), "{l2}");
        assert!(l2.contains("on their L2 segment"), "{l2}");
    }
}
