//! Health checks of route backends (`[vip.proxy.sni] routes` of TCP VIPs, `[vip.proxy] routes`
//! of HTTP VIPs). Those backends live only in lb-proxy, not in the daemon's state, so their
//! checkers report straight to the proxy: a backend that fails its VIP's health check gets no
//! new connections (requests) for its names and paths.
use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use lb_proxy::ProxyHandle;
use tokio::task::AbortHandle;

use crate::config::HealthSpec;
use crate::health::{self, Target};
use crate::state::Health;
use crate::state::VipState;

/// What a VIP's route checkers were started from: a change restarts them.
#[derive(Clone, PartialEq)]
struct Plan {
    spec: HealthSpec,
    addrs: Vec<SocketAddr>,
}

/// The running route checkers of every proxy VIP.
#[derive(Default)]
pub struct RouteChecks {
    running: HashMap<String, (Plan, Vec<AbortHandle>)>,
}

impl RouteChecks {
    /// Starts, restarts or stops the checkers of `vip`'s route backends: checked with
    /// the VIP's health table, except addresses that are also the VIP's own backends (the
    /// daemon checks those, and the proxy applies the verdict to both).
    pub fn sync(&mut self, name: &str, vip: &VipState, handle: &ProxyHandle, runtime: &tokio::runtime::Handle) {
        let plan = plan(vip);
        if self.running.get(name).map(|(p, _)| p) == plan.as_ref() {
            return;
        }
        self.stop(name);
        let Some(plan) = plan else { return };
        let addrs = Arc::new(plan.addrs.clone());
        let (vip_name, handle) = (name.to_string(), handle.clone());
        let sink: health::Sink = {
            let addrs = addrs.clone();
            Arc::new(move |event: health::Event| {
                let addr = addrs[event.backend_id as usize];
                let up = event.health == Health::Up;
                tracing::info!(vip = %vip_name, backend = %addr, health = event.health.as_str(), reason = %event.reason, "route backend health");
                if let Err(e) = handle.set_backend_health(&vip_name, addr, up) {
                    tracing::warn!(vip = %vip_name, backend = %addr, error = %e, "route backend health not applied");
                }
            })
        };
        let tasks = addrs
            .iter()
            .enumerate()
            .map(|(i, &address)| {
                let target = Target {
                    backend_id: i as u32,
                    address,
                    vip: name.to_string(),
                    spec: plan.spec.clone(),
                    latency: health::latency_histogram(),
                };
                // Routes start in rotation (as before checks existed): `fall` failures, or a
                // refused connection, take a backend out.
                runtime.spawn(health::run_checker(target, 0, Health::Up, sink.clone())).abort_handle()
            })
            .collect();
        self.running.insert(name.to_string(), (plan, tasks));
    }

    /// Stops the checkers of VIP `name` (removed or restarted).
    pub fn stop(&mut self, name: &str) {
        if let Some((_, tasks)) = self.running.remove(name) {
            tasks.iter().for_each(AbortHandle::abort);
        }
    }

    /// Stops every checker.
    pub fn stop_all(&mut self) {
        self.running.drain().flat_map(|(_, (_, tasks))| tasks).for_each(|t| t.abort());
    }
}

impl Drop for RouteChecks {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The route backends to check and how, if the VIP has routes (SNI or HTTP) and a health
/// table.
fn plan(vip: &VipState) -> Option<Plan> {
    let spec = vip.health.clone()?;
    let proxy = vip.proxy.as_ref()?;
    let sni = proxy.sni.iter().flat_map(|s| &s.routes).flat_map(|r| &r.backends);
    let http = proxy.routes.iter().flat_map(|r| &r.backends);
    let own: BTreeSet<SocketAddr> = vip.backends.iter().map(|b| b.address).collect();
    let addrs: BTreeSet<SocketAddr> = sni.chain(http).copied().filter(|a| !own.contains(a)).collect();
    (!addrs.is_empty()).then(|| Plan { spec, addrs: addrs.into_iter().collect() })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::time::Duration;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use crate::testing::rig::{Daemon, lb_toml};

    /// A backend that answers its health check with `health` and counts the other
    /// connections (TLS passed through: it only reads the ClientHello and closes).
    async fn backend(health: &'static str) -> (u16, std::sync::Arc<AtomicU64>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let relayed = std::sync::Arc::new(AtomicU64::new(0));
        let count = relayed.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    if buf[..n].starts_with(b"GET ") {
                        let answer = format!("HTTP/1.1 {health}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                        let _ = s.write_all(answer.as_bytes()).await;
                    } else if n > 0 {
                        count.fetch_add(1, Relaxed);
                    }
                });
            }
        });
        (port, relayed)
    }

    /// A ClientHello (TLS 1.2 record) naming `name`: what passthrough routing reads.
    fn client_hello(name: &str) -> Vec<u8> {
        let with_len16 = |kind: &[u8], body: &[u8]| [kind, &(body.len() as u16).to_be_bytes(), body].concat();
        let server_name = with_len16(&[0], name.as_bytes());
        let extension = with_len16(&[0, 0], &with_len16(&[], &server_name));
        let hello = [&[3, 3][..], &[0; 32], &[0], &[0, 2, 0x13, 0x01], &[1, 0], &with_len16(&[], &extension)].concat();
        let handshake = [&[1][..], &(hello.len() as u32).to_be_bytes()[1..], &hello].concat();
        with_len16(&[0x16, 3, 1], &handshake)
    }

    #[tokio::test]
    async fn sni_route_backends_that_fail_the_vips_check_get_no_connections() {
        let (default, _) = backend("200 OK").await;
        let (good, to_good) = backend("200 OK").await;
        let (bad, to_bad) = backend("500 Internal Server Error").await;
        let port = crate::testing::ports::free_port();
        let vip = format!(
            "[[vip]]\nname = \"tls\"\naddress = \"127.0.0.1\"\nport = {port}\nforwarding = \"proxy\"\n\
             health = {{ kind = \"http\", path = \"/health\", interval = \"100ms\", rise = 1, fall = 1 }}\n\
             backends = [ {{ address = \"127.0.0.1\", port = {default} }} ]\n\
             [vip.proxy.sni]\nroutes = [ {{ names = [\"a.test\"], backends = [\"127.0.0.1:{good}\", \"127.0.0.1:{bad}\"] }} ]\n"
        );
        let d = Daemon::start(&lb_toml(&vip)).await;
        // A few checks: the failing route backend is out after its first.
        tokio::time::sleep(Duration::from_millis(600)).await;
        for _ in 0..10 {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            s.write_all(&client_hello("a.test")).await.unwrap();
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            (to_good.load(Relaxed), to_bad.load(Relaxed)),
            (10, 0),
            "every a.test connection to the healthy one"
        );
        d.stop().await;
    }

    #[tokio::test]
    async fn http_route_backends_that_fail_the_vips_check_get_no_requests() {
        let (default, to_default) = backend("200 OK").await;
        let (good, to_good) = backend("200 OK").await;
        let (bad, to_bad) = backend("500 Internal Server Error").await;
        let port = crate::testing::ports::free_port();
        let vip = format!(
            "[[vip]]\nname = \"routed\"\naddress = \"127.0.0.1\"\nport = {port}\nprotocol = \"http\"\n\
             health = {{ kind = \"http\", path = \"/health\", interval = \"100ms\", rise = 1, fall = 1 }}\n\
             backends = [ {{ address = \"127.0.0.1\", port = {default} }} ]\n\
             [vip.proxy]\nroutes = [ {{ hosts = [\"api.test\"], path_prefix = \"/v1/\", backends = [\"127.0.0.1:{good}\", \"127.0.0.1:{bad}\"] }} ]\n"
        );
        let d = Daemon::start(&lb_toml(&vip)).await;
        // A few checks: the failing route backend is out after its first.
        tokio::time::sleep(Duration::from_millis(600)).await;
        for _ in 0..10 {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            s.write_all(
                b"POST /v1/users HTTP/1.1\r\nHost: api.test\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx",
            )
            .await
            .unwrap();
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            (to_good.load(Relaxed), to_bad.load(Relaxed), to_default.load(Relaxed)),
            (10, 0, 0),
            "every api.test/v1/ request to the healthy route backend"
        );
        d.stop().await;
    }
}
