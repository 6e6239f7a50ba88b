//! TCP VIPs: each client connection is relayed to one backend, chosen like HTTP requests are,
//! with connect timeout and retry on another backend. With `sni` routes, the backend set is
//! chosen by the server name of the client's TLS ClientHello (passthrough: TLS is not
//! terminated). A relay ends after `timeouts.tunnel` without traffic either way.
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;

use tokio::net::TcpStream;

use crate::error::UpstreamError;
use crate::pool::dial;
use crate::proxy_protocol;
use crate::relay::relay;
use crate::shutdown::Tasks;
use crate::tls::{ClientHelloError, read_server_name};
use crate::vip::Vip;
use lb_common::ip_bytes;

/// Relays one client connection; in-flight relays get the grace period, then they are cut.
pub(crate) async fn serve_connection(stream: TcpStream, client: SocketAddr, vip: &Vip, tasks: Tasks) {
    tokio::select! {
        biased;
        _ = handle(stream, client, vip) => {}
        _ = tasks.force.raised() => {}
    }
}

async fn handle(client_stream: TcpStream, client: SocketAddr, vip: &Vip) {
    let spec = &vip.spec;
    let opts = &spec.options;
    // TLS passthrough routed by name: the ClientHello is peeked, so the backend gets it whole.
    let server_name = if opts.sni.is_some() {
        match read_server_name(&client_stream, opts.timeouts.handshake).await {
            Ok(name) => name,
            Err(e) => {
                tracing::debug!(client = %client, error = e.as_str(), "no usable ClientHello");
                vip.counters.tls_failures.fetch_add(1, Relaxed);
                if e == ClientHelloError::NotTls {
                    vip.counters.client_errors.fetch_add(1, Relaxed);
                }
                return;
            }
        }
    } else {
        None
    };
    // Clients that sent no name go to the VIP's own backends.
    let route = server_name.as_deref().and_then(|name| vip.route(Some(name), ""));
    let hash = lb_common::hash::client_hash(&ip_bytes(client.ip()).0, spec.hash_seed);
    let header = proxy_protocol::header(opts.proxy_protocol, client, vip.local_addr);
    let dial_how = vip.dial();
    let mut tried = Vec::new();
    for attempt in 0..=opts.retries.max {
        let Some(backend) = vip.pick_in_route(route, hash, &tried) else {
            break;
        };
        if attempt > 0 {
            vip.counters.retries.fetch_add(1, Relaxed);
        }
        tried.push(backend.addr);
        let Ok(slot) = backend.gate.admit(spec.options.timeouts.queue, None).await else {
            continue;
        };
        let active = backend.begin();
        match dial(backend.addr, &dial_how, header.as_deref()).await {
            Ok(upstream) => {
                backend.outlier.record_success();
                if let Err(e) = relay(client_stream, upstream, opts.timeouts.tunnel).await {
                    tracing::debug!(backend = %backend.addr, error = %e, "relay ended with an error");
                }
                drop((active, slot));
                return;
            }
            Err(e) => {
                log_failure(&e);
                backend.counters.error();
                backend.record_failure(&spec.options.outlier);
            }
        }
    }
    // No backend could be reached: the client sees its connection closed.
    vip.counters.rejected.fetch_add(1, Relaxed);
}

fn log_failure(e: &UpstreamError) {
    tracing::debug!(error = %e, "TCP backend attempt failed");
}
