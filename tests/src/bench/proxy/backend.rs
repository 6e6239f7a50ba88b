//! Benchmark backend: a minimal HTTP/1.1 keep-alive server on each given port, answering
//! `/1k` and `/300k` with fixed bodies (anything else: 2 bytes).
//! Usage: lb-bench proxy-backend <threads> <port>...
use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

pub fn run(args: &[String]) {
    let threads: usize =
        args.first().and_then(|a| a.parse().ok()).expect("usage: lb-bench proxy-backend <threads> <port>...");
    let ports: Vec<u16> = args[1..].iter().map(|p| p.parse().expect("port")).collect();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build().unwrap();
    rt.block_on(async move {
        let small = Bytes::from(vec![b'a'; 1024]);
        let large = Bytes::from(vec![b'b'; 300 * 1024]);
        let mut tasks = Vec::new();
        for port in ports {
            let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
            let (small, large) = (small.clone(), large.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let (small, large) = (small.clone(), large.clone());
                    tokio::spawn(async move {
                        let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                            let body = match req.uri().path() {
                                "/1k" => small.clone(),
                                "/300k" => large.clone(),
                                _ => Bytes::from_static(b"ok"),
                            };
                            async move { Ok::<_, Infallible>(Response::new(Full::new(body))) }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
    });
}
