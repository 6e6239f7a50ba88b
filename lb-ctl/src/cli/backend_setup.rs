//! `lb-ctl backend-setup`: what a DSR backend needs, printed as a script, applied, or checked
//! on the backend itself. A DSR backend answers clients straight from the VIP, so it must hold
//! the VIP (on `lo`, where it answers no ARP), must not announce it, must accept packets whose
//! source is a client it has no route back to through the tunnel, and must remove the IPIP
//! header. Most "it does not forward" reports of DSR balancers are one of these missing.
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, bail};
use ipnet::Ipv4Net;

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
    OnLoopback(Ipv4Addr),
    /// A sysctl under /proc/sys holds one of the accepted values.
    Sysctl { key: String, accepted: &'static [&'static str] },
    /// The decapsulator is attached (pinned) on the interface.
    Decap(String),
}

fn steps(iface: &str, vips: &[Ipv4Addr], from: &[Ipv4Net], mode: DsrMode) -> Vec<Step> {
    let mut out = Vec::new();
    for vip in vips {
        out.push(Step {
            what: format!("VIP {vip} on lo"),
            why: "the backend answers from the VIP, and holds it where it answers no ARP",
            command: vec!["ip".into(), "addr".into(), "replace".into(), format!("{vip}/32"), "dev".into(), "lo".into()],
            check: Check::OnLoopback(*vip),
        });
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
pub fn script(iface: &str, vips: &[Ipv4Addr], from: &[Ipv4Net], mode: DsrMode) -> String {
    let vip_list: Vec<String> = vips.iter().map(Ipv4Addr::to_string).collect();
    let mut out = match mode {
        DsrMode::Ipip | DsrMode::Gue => format!(
            "#!/bin/sh\n# A DSR ({}) backend of {} behind balancers {}: run as root on the backend.\nset -e\n",
            if mode == DsrMode::Gue { "GUE" } else { "IPIP" },
            vip_list.join(", "),
            from.iter().map(Ipv4Net::to_string).collect::<Vec<_>>().join(", ")
        ),
        DsrMode::L2 => format!(
            "#!/bin/sh\n# A DSR (by MAC) backend of {} on the balancers' segment: run as root on the backend.\nset -e\n",
            vip_list.join(", ")
        ),
    };
    for s in steps(iface, vips, from, mode) {
        out.push_str(&format!("# {}: {}\n{}\n", s.what, s.why, s.command.join(" ")));
    }
    if mode == DsrMode::L2 {
        out.push_str(
            "# Segment: the balancers send VIP packets unchanged to this host's MAC address, so it must be\n\
             # on their L2 segment (a neighbour, no router between); no MTU change is needed.\n",
        );
        return out;
    }
    let (name, bytes) = if mode == DsrMode::Gue { ("GUE", 28) } else { ("IPIP", 20) };
    out.push_str(&format!(
        "# MTU: {name} adds {bytes} bytes on the way from the balancer to this backend. Give that link an MTU\n\
         # {bytes} bytes larger than the clients' (e.g. {}), or the balancer answers full-size packets\n\
         # with ICMP \"fragmentation needed\" and clients lower their path MTU (it works, at a cost).\n",
        1500 + bytes
    ));
    out
}

fn holds(check: &Check) -> anyhow::Result<bool> {
    Ok(match check {
        Check::OnLoopback(vip) => {
            let out = Command::new("ip").args(["-4", "-o", "addr", "show", "dev", "lo"]).output().context("ip addr")?;
            String::from_utf8_lossy(&out.stdout).split_whitespace().any(|w| w == format!("{vip}/32"))
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
pub fn check(iface: &str, vips: &[Ipv4Addr], from: &[Ipv4Net], mode: DsrMode) -> anyhow::Result<bool> {
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
pub fn apply(iface: &str, vips: &[Ipv4Addr], from: &[Ipv4Net], mode: DsrMode) -> anyhow::Result<()> {
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
}
