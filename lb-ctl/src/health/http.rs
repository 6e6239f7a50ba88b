//! `kind = "http"`: the backend is healthy if `GET path` answers the expected status in time.
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper::Request;
use hyper_util::rt::TokioIo;

use super::Outcome;

/// Sends `GET path` to `addr` over a new connection; the whole exchange must fit `timeout`.
pub async fn check(addr: SocketAddr, path: &str, expect: u16, timeout: Duration) -> Outcome {
    let started = tokio::time::Instant::now();
    let stream = match super::tcp::connect(addr, timeout).await {
        Ok(s) => s,
        Err(outcome) => return outcome,
    };
    let left = timeout.saturating_sub(started.elapsed());
    match tokio::time::timeout(left, exchange(stream, addr, path)).await {
        Ok(Ok(status)) if status == expect => Outcome::Success,
        Ok(Ok(status)) => Outcome::Failure(format!("GET {path}: status {status}, expected {expect}")),
        Ok(Err(e)) => Outcome::Failure(format!("GET {path}: {e}")),
        Err(_) => Outcome::Failure(format!("GET {path}: no answer within {}", humantime::format_duration(timeout))),
    }
}

async fn exchange(stream: tokio::net::TcpStream, addr: SocketAddr, path: &str) -> Result<u16, String> {
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    let conn = tokio::spawn(conn);
    let request = Request::get(path)
        .header(hyper::header::HOST, addr.to_string())
        .header(hyper::header::USER_AGENT, "lb-ctl-health")
        .header(hyper::header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("invalid request: {e}"))?;
    let result = sender.send_request(request).await.map(|r| r.status().as_u16()).map_err(|e| e.to_string());
    conn.abort();
    result
}
