//! nginx and HAProxy configured as an operator would for this test: the same worker count
//! as lb-proxy, keep-alive to the backends, no logging, buffers sized for the payload, the
//! same certificate and a TLS session cache.
use std::path::Path;

use super::{Ports, WORKERS};

/// The certificate every peer serves (ECDSA P-256, self-signed, made for the run).
pub struct Cert<'a> {
    pub chain: &'a Path,
    pub key: &'a Path,
    /// Chain and key in one file, as HAProxy's `crt` takes them.
    pub combined: &'a Path,
}

/// nginx's main context: in the foreground under the benchmark, the stream module loaded,
/// `workers` worker processes, files in `dir`, errors only to stderr.
pub fn nginx_main(dir: &Path, workers: usize, connections: usize) -> String {
    format!(
        "load_module /usr/lib/nginx/modules/ngx_stream_module.so;
daemon off;
master_process on;
worker_processes {workers};
pid {}/nginx.pid;
error_log stderr error;
events {{ worker_connections {connections}; }}
",
        dir.display()
    )
}

pub fn nginx_conf(dir: &Path, ports: &Ports, cert: &Cert, backends: &[u16], bulk_server: u16) -> String {
    let Ports { http, tcp, tls, h2c, bulk } = *ports;
    let servers: String = backends.iter().map(|p| format!("        server 127.0.0.1:{p};\n")).collect();
    format!(
        "{main}http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_requests 100000;
    # Buffers sized for the largest payload (300 KiB), as an operator would: with the
    # default 4 KiB ones nginx spills to disk-backed temp buffers and loses the race.
    proxy_buffer_size 16k;
    proxy_buffers 32 16k;
    proxy_busy_buffers_size 64k;
    upstream backends {{
{servers}        keepalive 128;
    }}
    ssl_certificate {chain};
    ssl_certificate_key {key};
    ssl_session_cache shared:SSL:10m;
    # TLS 1.3 too: nginx 1.22 offers only up to TLS 1.2 unless told, and a TLS 1.2 session
    # resumed skips the key exchange a TLS 1.3 one makes, so the peers would not do the same
    # work. Every peer picks from the same suites in the server's order, AES-128-GCM first.
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_prefer_server_ciphers on;
    ssl_conf_command Ciphersuites {TLS13_SUITES};
    # h2c (prior knowledge) needs a listener of its own in nginx 1.22.
    server {{
        listen 127.0.0.1:{http};
        listen 127.0.0.1:{tls} ssl;
        listen 127.0.0.1:{h2c} http2;
        http2_max_concurrent_streams 128;
        location / {{
            proxy_pass http://backends;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }}
    }}
}}
stream {{
    upstream tcp_backends {{
{servers}    }}
    server {{
        listen 127.0.0.1:{tcp};
        proxy_pass tcp_backends;
    }}
    server {{
        listen 127.0.0.1:{bulk};
        proxy_pass 127.0.0.1:{bulk_server};
        proxy_buffer_size 64k;
    }}
}}
",
        main = nginx_main(dir, WORKERS, 4096),
        dir = dir.display(),
        chain = cert.chain.display(),
        key = cert.key.display(),
    )
}

/// The TLS 1.3 suites of nginx and HAProxy, in lb-proxy's order (the server's order decides).
const TLS13_SUITES: &str = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

pub fn haproxy_conf(ports: &Ports, cert: &Cert, backends: &[u16], bulk_server: u16) -> String {
    let Ports { http, tcp, tls, h2c, bulk } = *ports;
    let crt = cert.combined.display();
    let servers: String =
        backends.iter().enumerate().map(|(i, p)| format!("    server b{i} 127.0.0.1:{p}\n")).collect();
    format!(
        "global
    nbthread {WORKERS}
    maxconn 4000
    # Buffers sized for the payload (the 16 KiB default halves 300 KiB throughput).
    tune.bufsize 65536
    # TLS 1.2 and 1.3 (HAProxy's default), the suites in the same order as the other peers.
    ssl-default-bind-options ssl-min-ver TLSv1.2
    ssl-default-bind-ciphersuites {TLS13_SUITES}
defaults
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend http_in
    mode http
    bind 127.0.0.1:{http}
    bind 127.0.0.1:{tls} ssl crt {crt} alpn http/1.1
    bind 127.0.0.1:{h2c} proto h2
    default_backend http_out
backend http_out
    mode http
    balance roundrobin
    http-reuse always
{servers}frontend tcp_in
    mode tcp
    bind 127.0.0.1:{tcp}
    default_backend tcp_out
backend tcp_out
    mode tcp
    balance roundrobin
{servers}frontend bulk_in
    mode tcp
    bind 127.0.0.1:{bulk}
    default_backend bulk_out
backend bulk_out
    mode tcp
    server bulk 127.0.0.1:{bulk_server}
"
    )
}
