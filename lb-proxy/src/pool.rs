//! Backend connections: dialing (connect timeout, PROXY header) and the per-backend pool of idle
//! HTTP/1.1 keep-alive connections.
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::error::{BoxError, UpstreamError};
use crate::http::upstream::{Conn, Stream};
use crate::outlier::now_ms;
use crate::tls::BackendConnector;

/// Request bodies sent upstream: the client's streamed body, or empty on a retry.
pub(crate) type UpBody = BoxBody<Bytes, BoxError>;

/// How a VIP connects to its backends.
#[derive(Clone, Debug)]
pub(crate) struct Dial {
    pub(crate) connect_timeout: Duration,
    /// TCP keepalive idle time; zero for none.
    pub(crate) keepalive: Duration,
    pub(crate) tls: Option<BackendConnector>,
}

/// Turns on TCP keepalive probes after `idle` of silence (none for zero): a peer that
/// vanished without a FIN (power loss, a dropped NAT entry) is then found.
pub(crate) fn set_keepalive(socket: socket2::SockRef<'_>, idle: Duration) {
    if idle.is_zero() {
        return;
    }
    let interval = (idle / 4).max(Duration::from_secs(1));
    let ka = socket2::TcpKeepalive::new().with_time(idle).with_interval(interval).with_retries(4);
    if let Err(e) = socket.set_tcp_keepalive(&ka) {
        tracing::debug!(error = %e, "cannot set TCP keepalive");
    }
}

/// What every client socket of a VIP gets (no Nagle delay, keepalive after `keepalive`), set
/// once on its listener: Linux copies these options to each accepted socket, which saves
/// five system calls per client connection.
pub(crate) fn set_client_options(listener: &std::net::TcpListener, keepalive: Duration) {
    let socket = socket2::SockRef::from(listener);
    if let Err(e) = socket.set_tcp_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
    }
    set_keepalive(socket, keepalive);
}

/// Opens a TCP connection to `addr` within the connect timeout and writes the PROXY header,
/// if any.
pub(crate) async fn dial(
    addr: SocketAddr,
    how: &Dial,
    proxy_header: Option<&[u8]>,
) -> Result<TcpStream, UpstreamError> {
    let connect = TcpStream::connect(addr);
    let mut stream = match tokio::time::timeout(how.connect_timeout, connect).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(UpstreamError::Connect(addr, e)),
        Err(_) => return Err(UpstreamError::ConnectTimeout(addr)),
    };
    // Requests and small responses must not wait for Nagle.
    let _ = stream.set_nodelay(true);
    set_keepalive(socket2::SockRef::from(&stream), how.keepalive);
    if let Some(h) = proxy_header {
        stream.write_all(h).await.map_err(|e| UpstreamError::Connect(addr, e))?;
    }
    Ok(stream)
}

/// Dials a backend for HTTP/1.1, with TLS if the VIP speaks it to its backends.
pub(crate) async fn open_http(
    addr: SocketAddr,
    how: &Dial,
    proxy_header: Option<&[u8]>,
) -> Result<Box<Conn>, UpstreamError> {
    let stream = dial(addr, how, proxy_header).await?;
    let stream = match &how.tls {
        None => Stream::Plain(stream),
        Some(tls) => {
            let tls_stream = tokio::time::timeout(how.connect_timeout, tls.connect(stream))
                .await
                .map_err(|_| UpstreamError::ConnectTimeout(addr))?
                .map_err(|e| UpstreamError::Tls(addr, e))?;
            Stream::Tls(Box::new(tls_stream))
        }
    };
    Ok(Conn::new(stream))
}

/// Idle keep-alive connections of one backend, newest last (taken first: it is the least
/// likely to have been closed by the backend's own idle timeout).
pub(crate) struct Pool {
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
    idle_timeout: Duration,
}

struct Idle {
    conn: Box<Conn>,
    /// The client address a PROXY header announced on this connection; such connections only
    /// serve that client again. None without PROXY protocol.
    tag: Option<SocketAddr>,
    /// When it was put back (`now_ms`).
    since_ms: u64,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("max_idle", &self.max_idle).finish_non_exhaustive()
    }
}

impl Pool {
    pub(crate) fn new(max_idle: usize, idle_timeout: Duration) -> Self {
        Pool { idle: Mutex::new(Vec::new()), max_idle, idle_timeout }
    }

    pub(crate) fn take(&self, tag: Option<SocketAddr>) -> Option<Box<Conn>> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let pos = idle.iter().rposition(|c| c.tag == tag)?;
            let c = idle.swap_remove(pos);
            // Expired or closed connections are dropped on the way.
            if now_ms().saturating_sub(c.since_ms) < self.idle_timeout.as_millis() as u64 && c.conn.is_usable() {
                return Some(c.conn);
            }
        }
    }

    pub(crate) fn put(&self, conn: Box<Conn>, tag: Option<SocketAddr>) {
        if self.max_idle == 0 {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() >= self.max_idle {
            idle.remove(0);
        }
        idle.push(Idle { conn, tag, since_ms: now_ms() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keepalive_is_set_as_configured() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let sock = socket2::SockRef::from(&s);
        set_keepalive(socket2::SockRef::from(&s), Duration::ZERO);
        assert!(!sock.keepalive().unwrap());
        set_keepalive(socket2::SockRef::from(&s), Duration::from_secs(42));
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(42));
    }

    /// The client options are set on the listener only: accepted sockets must inherit them.
    #[test]
    fn accepted_sockets_inherit_the_listeners_client_options() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        set_client_options(&listener, Duration::from_secs(42));
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let sock = socket2::SockRef::from(&accepted);
        assert!(sock.tcp_nodelay().unwrap(), "TCP_NODELAY");
        assert!(sock.keepalive().unwrap(), "SO_KEEPALIVE");
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(42));
        assert_eq!(sock.tcp_keepalive_interval().unwrap(), Duration::from_secs(10));
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), 4);
    }
}
