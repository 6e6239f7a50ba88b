//! QUIC end to end with a real QUIC stack (quinn): two backends in the namespace lab are quinn
//! servers whose connection-ID generator writes their server id (Katran's encoding,
//! `lb_common::quic::encode`); the real daemon balances a UDP VIP (NAT) over them. A client
//! opens a connection through the VIP, and mid-transfer rebinds to a new socket on another
//! address and port (as NAT rebinding or a network change does), an address the ring places on
//! the other backend. With `quic = true` the transfer completes byte for byte on the backend it
//! started on; the same test with quic off shows the connection breaking, so it proves the
//! feature. Needs root.
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lb_common::quic::{CID_BYTES, CidVersion, encode};
use lb_ctl::api::types::ExplainView;
use lb_tests::lab::{Daemon, LB_PORT, Lab, backend_addr, client_addr, pattern_byte};
use lb_tests::netns::Netns;
use lb_tests::privileges::require_root;
use quinn::rustls::pki_types as rustls_pki;
use quinn::{ConnectionId, ConnectionIdGenerator, Endpoint, EndpointConfig};

const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);
const VIP_PORT: u16 = 443;
const BACKEND_PORT: u16 = 4433;
const BACKENDS: usize = 2;
/// Client addresses: the first opens the connection, another is where it moves to.
const CLIENTS: usize = 8;
/// The backends' server ids (CID version 1).
const SERVER_IDS: [u32; BACKENDS] = [0x0101, 0x0202];
/// Bytes of the transfer, and how many the client reads before it moves: the rest is sent
/// after the move (flow control holds the server back until the client reads).
const TOTAL: usize = 8 << 20;
const BEFORE_MOVE: usize = 1 << 20;
/// How long the client's connection may go without hearing from its server (quinn's idle
/// timeout): what ends a broken connection.
const IDLE: Duration = Duration::from_secs(4);
/// Bound on the whole transfer, so a stall cannot hang the suite.
const TRANSFER_LIMIT: Duration = Duration::from_secs(60);

/// Writes the backend's server id into every connection ID it issues; the other bits are a
/// counter mixed by lb-common's hash (unique per connection ID; a real server uses a cipher).
struct ServerIdCids {
    server_id: u32,
    next: u64,
}

impl ConnectionIdGenerator for ServerIdCids {
    fn generate_cid(&mut self) -> ConnectionId {
        static SALT: AtomicU64 = AtomicU64::new(0);
        self.next = self.next.wrapping_add(1);
        let salt = SALT.fetch_add(1, Ordering::Relaxed);
        let mixed =
            lb_common::hash::bytes_hash(&[self.next.to_le_bytes(), salt.to_le_bytes()].concat(), self.server_id.into());
        let rest: [u8; CID_BYTES] = mixed.to_le_bytes();
        ConnectionId::new(&encode(CidVersion::V1, self.server_id, &rest).expect("the id fits version 1"))
    }
    fn cid_len(&self) -> usize {
        CID_BYTES
    }
    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// A UDP socket bound to `addr` inside `ns` (it keeps the namespace after the thread leaves).
fn socket_in(ns: &Netns, addr: SocketAddr) -> std::net::UdpSocket {
    let _in = ns.enter();
    let socket = std::net::UdpSocket::bind(addr).unwrap_or_else(|e| panic!("binding {addr} in {}: {e}", ns.name));
    socket.set_nonblocking(true).unwrap();
    socket
}

/// The certificate the backends present (self-signed for "localhost"), and the key.
fn certificate() -> (rustls_pki::CertificateDer<'static>, rustls_pki::PrivateKeyDer<'static>) {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let key = rustls_pki::PrivatePkcs8KeyDer::from(c.signing_key.serialize_der());
    (c.cert.der().clone(), key.into())
}

/// Backend `i`: a quinn server on BACKEND_PORT whose connection IDs carry `SERVER_IDS[i]`.
/// Each stream asks for a length (8 bytes, big endian) and gets the backend's index, then that
/// many bytes of `pattern_byte`.
fn start_backend(
    lab: &Lab,
    i: usize,
    cert: &(rustls_pki::CertificateDer<'static>, rustls_pki::PrivateKeyDer<'static>),
) -> Endpoint {
    let mut config = EndpointConfig::default();
    let server_id = SERVER_IDS[i];
    config.cid_generator(move || Box::new(ServerIdCids { server_id, next: 0 }));
    let server = quinn::ServerConfig::with_single_cert(vec![cert.0.clone()], cert.1.clone_key()).unwrap();
    let socket = socket_in(&lab.backends[i], SocketAddr::from((backend_addr(i), BACKEND_PORT)));
    let endpoint = Endpoint::new(config, Some(server), socket, Arc::new(quinn::TokioRuntime)).unwrap();
    let accepting = endpoint.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accepting.accept().await {
            tokio::spawn(async move {
                let Ok(connection) = incoming.await else { return };
                while let Ok((mut send, mut recv)) = connection.accept_bi().await {
                    tokio::spawn(async move {
                        let mut asked = [0u8; 8];
                        if recv.read_exact(&mut asked).await.is_err() {
                            return;
                        }
                        let total = u64::from_be_bytes(asked) as usize;
                        let _ = send.write_all(&[i as u8]).await;
                        let mut sent = 0;
                        while sent < total {
                            let n = (total - sent).min(64 * 1024);
                            let piece: Vec<u8> = (sent..sent + n).map(pattern_byte).collect();
                            if send.write_all(&piece).await.is_err() {
                                return;
                            }
                            sent += n;
                        }
                        let _ = send.finish();
                        let _ = send.stopped().await;
                    });
                }
            });
        }
    });
    endpoint
}

/// What became of the client's transfer.
#[derive(Debug)]
enum Transfer {
    /// Every byte arrived, as sent, from backend `backend`.
    Completed { backend: usize },
    /// The connection failed after the move (or before: `moved` says).
    Broken { moved: bool, why: String },
}

/// The client: connects from `from` through the VIP, asks for TOTAL bytes, reads BEFORE_MOVE of
/// them, rebinds to `to`, then reads the rest, checking every byte.
async fn transfer(
    client: &Netns,
    from: SocketAddr,
    to: SocketAddr,
    cert: rustls_pki::CertificateDer<'static>,
) -> Transfer {
    let mut roots = quinn::rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let mut config = quinn::ClientConfig::with_root_certificates(Arc::new(roots)).unwrap();
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(IDLE.try_into().unwrap()));
    config.transport_config(Arc::new(transport));
    let mut endpoint =
        Endpoint::new(EndpointConfig::default(), None, socket_in(client, from), Arc::new(quinn::TokioRuntime)).unwrap();
    endpoint.set_default_client_config(config);
    let broken = |moved: bool| move |e: &dyn std::fmt::Display| Transfer::Broken { moved, why: e.to_string() };
    let connection = match endpoint.connect(SocketAddr::from((VIP, VIP_PORT)), "localhost").unwrap().await {
        Ok(c) => c,
        Err(e) => return broken(false)(&e),
    };
    let (mut send, mut recv) = match connection.open_bi().await {
        Ok(s) => s,
        Err(e) => return broken(false)(&e),
    };
    if let Err(e) = send.write_all(&(TOTAL as u64).to_be_bytes()).await {
        return broken(false)(&e);
    }
    let _ = send.finish();
    let mut backend = [0u8; 1];
    if let Err(e) = recv.read_exact(&mut backend).await {
        return broken(false)(&e);
    }
    let mut got = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    while got < TOTAL {
        if got >= BEFORE_MOVE && endpoint.local_addr().unwrap().ip() != to.ip() {
            endpoint.rebind(socket_in(client, to)).unwrap();
            assert_eq!(endpoint.local_addr().unwrap().ip(), to.ip());
        }
        let n = match recv.read(&mut buf).await {
            Ok(Some(n)) => n,
            Ok(None) => break,
            Err(e) => return broken(got >= BEFORE_MOVE)(&e),
        };
        if let Some(at) = (0..n).find(|k| buf[*k] != pattern_byte(got + k)) {
            panic!("byte {} differs: {} instead of {}", got + at, buf[at], pattern_byte(got + at));
        }
        got += n;
    }
    assert_eq!(got, TOTAL, "the stream ended early");
    connection.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    Transfer::Completed { backend: backend[0] as usize }
}

fn config_text(socket: &std::path::Path, quic: bool) -> String {
    let backends: Vec<String> = (0..BACKENDS)
        .map(|i| {
            let id = if quic { format!(", quic_server_id = {}", SERVER_IDS[i]) } else { String::new() };
            format!("  {{ address = \"{}\", port = {BACKEND_PORT}{id} }},", backend_addr(i))
        })
        .collect();
    format!(
        "[daemon]\napi_socket = \"{}\"\n\n[[vip]]\nname = \"h3\"\naddress = \"{VIP}\"\nport = {VIP_PORT}\nprotocol = \"udp\"\nhash = \"ip\"\nquic = {quic}\nbackends = [\n{}\n]\n",
        socket.display(),
        backends.join("\n")
    )
}

/// The backend `lb-ctl explain` says the ring gives `client`.
fn ring_backend(daemon: &Daemon, client: IpAddr) -> SocketAddr {
    let view: ExplainView =
        serde_json::from_str(&daemon.ok(&["explain", "h3", &client.to_string(), "--json"])).expect("explain --json");
    view.backend.expect("the ring has a backend")
}

fn counters(daemon: &Daemon) -> HashMap<String, u64> {
    let stats: lb_ctl::api::types::StatsView =
        serde_json::from_str(&daemon.ok(&["stats", "--json"])).expect("stats --json");
    stats.counters.into_iter().map(|c| (c.name, c.value)).collect()
}

/// Runs the move-mid-transfer scenario with quic on or off; returns what became of the transfer,
/// the backend the ring gives the first address, and the daemon's counters.
fn moved_transfer(tag: &str, quic: bool) -> (Transfer, usize, HashMap<String, u64>) {
    // Built (if stale) before the daemon's start is timed.
    lb_tests::lb_ctl_bin();
    let mut lab = Lab::new(tag, BACKENDS, CLIENTS);
    lab.pass_on_switch_port(LB_PORT);
    lab.resolve_backends();
    let mut daemon = Daemon::new(&lab.lb, "eth0", tag, &["--xdp-mode", "native"]);
    daemon.write_config_text(&config_text(&daemon.socket(), quic));
    daemon.start();

    let backend_index = |addr: SocketAddr| (0..BACKENDS).find(|i| addr.ip() == IpAddr::from(backend_addr(*i))).unwrap();
    let home = backend_index(ring_backend(&daemon, client_addr(0).into()));
    // An address the ring places on the other backend: where a connection not followed by
    // its server id would land.
    let away = (1..CLIENTS)
        .map(client_addr)
        .find(|a| backend_index(ring_backend(&daemon, (*a).into())) != home)
        .expect("a client address the ring gives the other backend");

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let cert = certificate();
    let outcome = runtime.block_on(async {
        let servers: Vec<Endpoint> = (0..BACKENDS).map(|i| start_backend(&lab, i, &cert)).collect();
        // Port 0: a new port too, as the kernel picks one for each socket.
        let (from, to) = (SocketAddr::from((client_addr(0), 0)), SocketAddr::from((away, 0)));
        let outcome = tokio::time::timeout(TRANSFER_LIMIT, transfer(&lab.client, from, to, cert.0.clone()))
            .await
            .unwrap_or(Transfer::Broken { moved: true, why: format!("no end within {TRANSFER_LIMIT:?}") });
        for s in servers {
            s.close(0u32.into(), b"test over");
        }
        outcome
    });
    let counters = counters(&daemon);
    daemon.stop();
    (outcome, home, counters)
}

#[test]
fn a_quic_connection_keeps_its_backend_when_the_client_moves() {
    if !require_root("a_quic_connection_keeps_its_backend_when_the_client_moves") {
        return;
    }
    let (outcome, home, counters) = moved_transfer("qon", true);
    match outcome {
        Transfer::Completed { backend } => {
            assert_eq!(backend, home, "served by the backend the ring gave the first address")
        }
        Transfer::Broken { moved, why } => {
            panic!("the transfer broke ({}): {why}", if moved { "after the move" } else { "before the move" })
        }
    }
    assert!(counters["quic_routed_by_server_id"] > 0, "{counters:?}");
    assert!(counters["quic_long_header"] > 0, "{counters:?}");
}

#[test]
fn without_quic_routing_the_moved_connection_breaks() {
    if !require_root("without_quic_routing_the_moved_connection_breaks") {
        return;
    }
    let (outcome, _, counters) = moved_transfer("qoff", false);
    match outcome {
        Transfer::Broken { moved: true, .. } => {}
        other => panic!("expected the connection to break after the move, got {other:?}"),
    }
    assert_eq!(counters["quic_routed_by_server_id"], 0, "{counters:?}");
}
