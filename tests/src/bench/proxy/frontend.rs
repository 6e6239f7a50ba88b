//! Benchmark front end: lb-proxy with an HTTP VIP and a TCP VIP over the same backends.
//! Usage: lb-bench proxy-frontend <workers> <http port> <tcp port> <backend port>...
use std::net::SocketAddr;

use lb_proxy::{BackendSpec, Mode, Proxy, ProxyVipSpec};

pub fn run(args: &[String]) {
    let usage = "usage: lb-bench proxy-frontend <workers> <http port> <tcp port> <backend port>...";
    let threads: usize = args.first().and_then(|a| a.parse().ok()).expect(usage);
    let port = |i: usize| -> u16 { args.get(i).and_then(|a| a.parse().ok()).expect(usage) };
    let (http, tcp) = (port(1), port(2));
    let backends: Vec<BackendSpec> =
        (3..args.len()).map(|i| BackendSpec::new(SocketAddr::from(([127, 0, 0, 1], port(i))))).collect();
    let vip = |name: &str, p: u16, mode: Mode| {
        let mut spec = ProxyVipSpec::new(name, SocketAddr::from(([127, 0, 0, 1], p)), mode);
        spec.backends = backends.clone();
        // Like the nginx and HAProxy configs of the benchmark: no client-address headers.
        spec.options.forwarded.x_forwarded = false;
        spec
    };
    // The proxy runs on its own worker threads; this runtime only starts and stops it.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let handle = Proxy::builder()
            .workers(threads)
            .start(vec![vip("http", http, Mode::Http), vip("tcp", tcp, Mode::Tcp)])
            .await
            .expect("start lb-proxy");
        // Runs until killed by the benchmark (or Ctrl-C).
        let _ = tokio::signal::ctrl_c().await;
        handle.shutdown(std::time::Duration::from_secs(1)).await;
    });
}
