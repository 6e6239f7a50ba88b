//! `kind = "tcp"`: the backend is healthy if a TCP connection to it opens in time.
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;

use super::Outcome;

/// Opens (and closes) a connection to `addr` within `timeout`.
pub async fn check(addr: SocketAddr, timeout: Duration) -> Outcome {
    match connect(addr, timeout).await {
        Ok(_) => Outcome::Success,
        Err(outcome) => outcome,
    }
}

/// A connection to `addr`, or the failed outcome (refused, error, timeout).
pub(super) async fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, Outcome> {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(Outcome::Refused(format!("connect: {e}")))
        }
        Ok(Err(e)) => Err(Outcome::Failure(format!("connect: {e}"))),
        Err(_) => Err(Outcome::Failure(format!("connect timed out after {}", humantime::format_duration(timeout)))),
    }
}
