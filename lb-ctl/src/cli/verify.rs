//! `lb-ctl backends verify VIP`: each backend checked from this balancer directly (as health
//! checks do) and along the data plane's own path (`dsr_probe`), with what the two together
//! say is wrong. Runs in the CLI process (root, on the balancer), so the daemon's writer is
//! never held up by probes.
use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;

use crate::api::client::{Client, ClientError};
use crate::api::types::VipView;
use crate::dsr_probe::{self, Path};

/// One backend's result.
#[derive(Debug, Serialize)]
pub struct Verified {
    pub backend: SocketAddr,
    /// A TCP connection to the backend's own address: Ok(ms) or what failed.
    pub direct: Result<u128, String>,
    /// The data plane's path (None for NAT VIPs, whose path is the direct one).
    pub path: Option<Result<u128, String>>,
    /// Both hold.
    pub ok: bool,
    /// What the results say, with the fix where one is known.
    pub verdict: String,
}

pub async fn run(c: &Client, vip: &str, timeout: Duration) -> Result<Vec<Verified>, ClientError> {
    let backends = c.backends(Some(vip)).await?;
    let Some(label) = backends.first().map(|b| b.vip.clone()) else {
        return Err(ClientError::Refused { status: 404, message: format!("VIP {vip:?} has no backends to verify") });
    };
    let vips = c.vips().await?;
    let iface = c.status().await?.interface;
    let v = vips
        .iter()
        .find(|v| label_of(v) == label)
        .ok_or_else(|| ClientError::Protocol(format!("VIP {label} not listed")))?;
    let path = match v.forwarding.as_str() {
        "dsr-ipip" | "dsr-gue" => {
            let source =
                v.encap_source.ok_or_else(|| ClientError::Protocol(format!("VIP {label} has no encap_source")))?;
            Some(if v.forwarding == "dsr-gue" { Path::Gue { source } } else { Path::Ipip { source } })
        }
        "dsr-l2" => Some(Path::L2 { iface: iface.clone() }),
        "nat" => None,
        other => {
            return Err(ClientError::Refused {
                status: 400,
                message: format!("VIP {label} is forwarded by {other}: verify covers XDP VIPs"),
            });
        }
    };
    let vip_addr = SocketAddr::new(v.address, v.port);

    let forwarding = v.forwarding.clone();
    let results = tokio::task::spawn_blocking(move || {
        backends.iter().map(|b| verify(vip_addr, b.address, &forwarding, path.as_ref(), &iface, timeout)).collect()
    })
    .await
    .map_err(|e| ClientError::Protocol(e.to_string()))?;
    Ok(results)
}

/// The label the daemon gives a VIP (its name, or `ADDR:PORT/PROTOCOL`).
fn label_of(v: &VipView) -> String {
    v.name.clone().unwrap_or_else(|| format!("{}/{}", SocketAddr::new(v.address, v.port), v.protocol))
}

fn verify(
    vip: SocketAddr,
    backend: SocketAddr,
    forwarding: &str,
    path: Option<&Path>,
    iface: &str,
    timeout: Duration,
) -> Verified {
    let started = std::time::Instant::now();
    let direct = std::net::TcpStream::connect_timeout(&backend, timeout)
        .map(|_| started.elapsed().as_millis())
        .map_err(|e| e.to_string());
    let path_result = path.map(|p| dsr_probe::probe(vip, backend.ip(), p, iface, timeout).map(|d| d.as_millis()));
    let verdict = verdict(vip, backend, forwarding, path, &direct, path_result.as_ref());
    let ok = direct.is_ok() && path_result.as_ref().is_none_or(|r| r.is_ok());
    Verified { backend, direct, path: path_result, ok, verdict }
}

/// What the two results say together.
fn verdict(
    vip: SocketAddr,
    backend: SocketAddr,
    forwarding: &str,
    path: Option<&Path>,
    direct: &Result<u128, String>,
    through: Option<&Result<u128, String>>,
) -> String {
    let mode = match path {
        Some(Path::Gue { .. }) => "gue",
        Some(Path::L2 { .. }) => "l2",
        _ => "ipip",
    };
    let from = match path {
        Some(Path::Ipip { source } | Path::Gue { source }) => format!(" --from {source}"),
        _ => String::new(),
    };
    let setup =
        format!("run `lb-ctl backend-setup eth0 --vip {} --mode {mode}{from} --check` on the backend", vip.ip());
    match (direct, through) {
        (Ok(_), None | Some(Ok(_))) => "ok".into(),
        (Ok(_), Some(Err(e))) => format!(
            "answers on {backend} but not to {vip} sent by {forwarding} ({e}): its health checks pass while its \
             clients time out. On the backend: the VIP {} on lo, {}, replies from the VIP not filtered \
             (rp_filter); {setup}",
            vip.ip(),
            match path {
                Some(Path::L2 { .. }) =>
                    "no answer to ARP or neighbour solicitations for the VIP on its own link".to_string(),
                _ => format!("a decapsulator that accepts the balancer's source (lb-ctl decap attach IFACE{from})"),
            }
        ),
        (Err(e), Some(Ok(_))) => {
            format!(
                "reached through {forwarding}, but not at {backend} ({e}): health checks will fail; check what listens on its own address"
            )
        }
        (Err(e), _) => format!("not reachable at {backend} ({e}): the backend is down or filtered"),
    }
}

pub fn render(results: &[Verified]) -> String {
    let cell = |r: &Result<u128, String>| match r {
        Ok(ms) => format!("ok {ms} ms"),
        Err(_) => "FAILED".to_string(),
    };
    let mut out = format!("{:<26} {:<12} {:<12} {}\n", "BACKEND", "DIRECT", "DATA PATH", "VERDICT");
    for r in results {
        let through = r.path.as_ref().map_or("(= direct)".to_string(), cell);
        out += &format!("{:<26} {:<12} {:<12} {}\n", r.backend.to_string(), cell(&r.direct), through, r.verdict);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_names_the_fix() {
        let vip: SocketAddr = "[2001:db8:a::20]:80".parse().unwrap();
        let backend: SocketAddr = "[2001:db8:b::11]:80".parse().unwrap();
        let ipip = Path::Ipip { source: "2001:db8:b::1".parse().unwrap() };
        let ok: Result<u128, String> = Ok(1);
        let failed: Result<u128, String> = Err("no SYN-ACK".into());
        assert_eq!(verdict(vip, backend, "dsr-ipip", Some(&ipip), &ok, Some(&ok)), "ok");
        let broken = verdict(vip, backend, "dsr-ipip", Some(&ipip), &ok, Some(&failed));
        assert!(broken.contains("but not to [2001:db8:a::20]:80 sent by dsr-ipip"), "{broken}");
        assert!(broken.contains("lb-ctl decap attach IFACE --from 2001:db8:b::1"), "{broken}");
        assert!(broken.contains("--mode ipip --from 2001:db8:b::1 --check"), "{broken}");
        let l2 = verdict(vip, backend, "dsr-l2", Some(&Path::L2 { iface: "eth0".into() }), &ok, Some(&failed));
        assert!(l2.contains("neighbour solicitations") && l2.contains("--mode l2 --check"), "{l2}");
        let down = verdict(vip, backend, "dsr-ipip", Some(&ipip), &failed, Some(&failed));
        assert!(down.starts_with("not reachable at [2001:db8:b::11]:80"), "{down}");
        assert_eq!(verdict(vip, backend, "nat", None, &ok, None), "ok");
    }
}
