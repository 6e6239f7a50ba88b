//! Benchmark front end: lb-proxy with the VIPs every peer serves (see `Ports`): HTTP (h2c
//! too, by the client's preface), TCP over the same backends, HTTPS (TLS terminated) over the
//! same backends, and a TCP VIP to the one bulk (iperf3) server.
//! Usage: lb-bench proxy-frontend <workers> <http> <tcp> <tls> <bulk> <bulk server port>
//! <certificate chain> <key> <backend port>...
use std::net::SocketAddr;
use std::path::PathBuf;

use lb_proxy::config::{CertificateFiles, TlsTermination};
use lb_proxy::{BackendSpec, Mode, Proxy, ProxyVipSpec};

const USAGE: &str = "usage: lb-bench proxy-frontend <workers> <http> <tcp> <tls> <bulk> <bulk server port> <chain> <key> <backend port>...";

pub fn run(args: &[String]) {
    let threads: usize = args.first().and_then(|a| a.parse().ok()).expect(USAGE);
    let port = |i: usize| -> u16 { args.get(i).and_then(|a| a.parse().ok()).expect(USAGE) };
    let (http, tcp, tls, bulk, bulk_server) = (port(1), port(2), port(3), port(4), port(5));
    let chain = PathBuf::from(args.get(6).expect(USAGE));
    let key = PathBuf::from(args.get(7).expect(USAGE));
    let local = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    let backends: Vec<BackendSpec> = (8..args.len()).map(|i| BackendSpec::new(local(port(i)))).collect();
    let vip = |name: &str, p: u16, mode: Mode, backends: &[BackendSpec]| {
        let mut spec = ProxyVipSpec::new(name, local(p), mode);
        spec.backends = backends.to_vec();
        // Like the nginx and HAProxy configs of the benchmark: no client-address headers.
        spec.options.forwarded.x_forwarded = false;
        spec
    };
    let mut https = vip("https", tls, Mode::Http, &backends);
    https.options.tls = Some(TlsTermination {
        certificates: vec![CertificateFiles { chain, key }],
        alpn: vec!["http/1.1".into()],
        min_version: "1.2".into(),
    });
    let vips = vec![
        vip("http", http, Mode::Http, &backends),
        vip("tcp", tcp, Mode::Tcp, &backends),
        https,
        vip("bulk", bulk, Mode::Tcp, &[BackendSpec::new(local(bulk_server))]),
    ];
    // The proxy runs on its own worker threads; this runtime only starts and stops it.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let handle = Proxy::builder().workers(threads).start(vips).await.expect("start lb-proxy");
        // Runs until killed by the benchmark (or Ctrl-C).
        let _ = tokio::signal::ctrl_c().await;
        handle.shutdown(std::time::Duration::from_secs(1)).await;
    });
}
