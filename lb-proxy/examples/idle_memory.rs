//! Memory of idle client connections: the proxy's resident set (VmRSS of its own process)
//! with 5000 idle keep-alive connections, after they close (the proxy trims by itself a few
//! seconds after a big drop, see src/trim.rs), after a burst of 5000 busy ones, and after an
//! explicit malloc_trim (on SIGUSR1). Prints figures.
//! Usage: cargo run --release -p lb-proxy --example idle_memory [connections]
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use lb_proxy::{BackendSpec, Mode, Proxy, ProxyVipSpec};
use tokio::net::{TcpListener, TcpStream};

/// As the daemon runs the proxy.
#[global_allocator]
static ALLOCATOR: lb_proxy::Allocator = lb_proxy::Allocator;

fn main() {
    raise_fd_limit();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--serve") {
        // As the daemon starts.
        lb_proxy::restart_with_malloc_tuning();
        let port: u16 = args[1].parse().unwrap();
        let backend: u16 = args[2].parse().unwrap();
        return serve(port, backend);
    }
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(5000);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(measure(n));
}

/// The measured process: only the proxy (2 workers), one HTTP VIP.
fn serve(port: u16, backend: u16) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut spec = ProxyVipSpec::new("m", SocketAddr::from(([127, 0, 0, 1], port)), Mode::Http);
        spec.backends = vec![BackendSpec::new(SocketAddr::from(([127, 0, 0, 1], backend)))];
        spec.options.limits.max_connections = 100_000;
        let handle = Proxy::builder().workers(2).start(vec![spec]).await.unwrap();
        let mut usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1()).unwrap();
        loop {
            tokio::select! {
                _ = usr1.recv() => {
                    // SAFETY: malloc_trim only walks glibc's own arenas.
                    unsafe { libc::malloc_trim(0) };
                }
                _ = tokio::signal::ctrl_c() => break,
            }
        }
        handle.shutdown(Duration::from_secs(1)).await;
    });
}

async fn measure(n: usize) {
    let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_port = backend.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((s, _)) = backend.accept().await {
            tokio::spawn(async move {
                let svc = service_fn(|_req| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(vec![b'x'; 1024]))))
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(s), svc).await;
            });
        }
    });
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args(["--serve", &port.to_string(), &backend_port.to_string()])
        .spawn()
        .unwrap();
    let pid = child.id();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    for _ in 0..500 {
        if TcpStream::connect(addr).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(open(addr, 4, 10).await);
    settle().await;
    let base = rss_kib(pid);
    println!("connections: {n}");
    println!("proxy RSS at start (after 40 requests):      {base:>8} KiB");

    let idle = open(addr, n, 1).await;
    settle().await;
    let with_idle = rss_kib(pid);
    println!(
        "with {n} idle keep-alive connections:        {with_idle:>8} KiB  ({:.1} KiB per connection)",
        (with_idle - base) as f64 / n as f64
    );
    drop(idle);
    settle().await;
    println!("after they closed:                           {:>8} KiB", rss_kib(pid));

    let busy = open(addr, n, 10).await;
    drop(busy);
    settle().await;
    println!("after a burst of {n} x 10 requests, closed:  {:>8} KiB", rss_kib(pid));
    // SAFETY: plain kill(2) on the child this process started.
    unsafe { libc::kill(pid as i32, libc::SIGUSR1) };
    settle().await;
    println!("after malloc_trim(0) in the proxy:           {:>8} KiB", rss_kib(pid));
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let _ = child.wait();
}

/// Client tasks holding their connections open; dropping this closes them all.
struct Held(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Held {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

/// `n` keep-alive connections, each after `requests` GETs; returned open (idle).
async fn open(addr: SocketAddr, n: usize, requests: usize) -> Held {
    let done = Arc::new(AtomicUsize::new(0));
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        let done = done.clone();
        held.push(tokio::spawn(async move {
            let s = TcpStream::connect(addr).await.unwrap();
            let (mut send, conn) =
                hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(s)).await.unwrap();
            let conn = tokio::spawn(conn);
            for _ in 0..requests {
                let req = hyper::Request::get("/").header("host", "m").body(Full::default()).unwrap();
                let resp = send.send_request(req).await.unwrap();
                let _ = resp.into_body().collect().await;
            }
            done.fetch_add(1, Relaxed);
            // Idle until aborted (bounded all the same).
            tokio::time::sleep(Duration::from_secs(600)).await;
            conn.abort();
            drop(send);
        }));
        // Clients arrive over time rather than all in one instant (bounded backlog).
        if i % 256 == 255 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    for _ in 0..6000 {
        if done.load(Relaxed) == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(done.load(Relaxed), n, "not every client got its answers");
    Held(held)
}

/// Long enough for the proxy's trimming thread (every 2 s) to act.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(5)).await;
}

fn rss_kib(pid: u32) -> i64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: get/setrlimit on this process with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
