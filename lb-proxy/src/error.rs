//! Library errors.
use std::io;
use std::net::SocketAddr;

/// Errors of bodies the proxy streams (its own, the client's, a backend's).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Errors of the proxy's public API.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// Binding a VIP's listener failed.
    #[error("cannot listen on {addr} for VIP {vip:?}: {source}")]
    Bind { vip: String, addr: SocketAddr, source: io::Error },
    /// Two specs (or a spec and a running VIP) have the same name.
    #[error("VIP {0:?} is defined twice")]
    DuplicateVip(String),
    /// No VIP of that name is served by this proxy.
    #[error("no proxy VIP named {0:?}")]
    UnknownVip(String),
    /// The VIP has no backend at that address.
    #[error("VIP {vip:?} has no backend {addr}")]
    UnknownBackend { vip: String, addr: SocketAddr },
    /// A spec that cannot be served (e.g. a header hash key on a TCP VIP).
    #[error("invalid spec for VIP {vip:?}: {reason}")]
    InvalidSpec { vip: String, reason: String },
    /// The proxy's worker threads could not be started.
    #[error("cannot start the proxy's worker threads: {0}")]
    Workers(io::Error),
}

/// What went wrong on a backend connection: always the backend's fault.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BackendFault {
    #[error("connection closed before the response ended")]
    Closed,
    #[error("{0}")]
    Io(io::Error),
    #[error("malformed response: {0}")]
    Malformed(&'static str),
}

/// A client-side failure of the upload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClientFault {
    Broken,
    Stalled,
    TooLarge,
}

/// Whose fault a failed request or connection is, as pingora's `ErrorSource` names it: this
/// decides what is counted, and against whom. Only `Upstream` failures count against a
/// backend (its error counter, outlier detection) or lead to another backend being tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorSource {
    /// The backend's: it refused, broke, timed out or answered nonsense.
    Upstream,
    /// The client's: a malformed, aborted, stalled or oversized request. Counted as a client
    /// error, never against a backend.
    Downstream,
    /// The proxy's own state or limits: no backend free, or the request's time budget spent.
    Internal,
}

/// Why a request could not be forwarded; each maps to one client-facing status, and to the
/// [`ErrorSource`] it is blamed on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpstreamError {
    /// No backend is up (all down, drained or ejected).
    #[error("no backend available")]
    NoBackend,
    /// The chosen backend is at max_connections and its queue is full (or the wait timed out).
    #[error("backend {0} is full")]
    Full(SocketAddr),
    /// Connecting failed (refused, unreachable, PROXY header write failed).
    #[error("connect to {0} failed: {1}")]
    Connect(SocketAddr, io::Error),
    /// Connecting took longer than the connect timeout.
    #[error("connect to {0} timed out")]
    ConnectTimeout(SocketAddr),
    /// The backend did not send a response head in time.
    #[error("backend {0} did not answer in time")]
    HeaderTimeout(SocketAddr),
    /// The request budget (`timeouts.request`) ran out.
    #[error("request timed out")]
    RequestTimeout,
    /// The backend closed or broke the connection, or sent an invalid response.
    #[error("backend {0} failed: {1}")]
    Http(SocketAddr, BackendFault),
    /// TLS to the backend failed (handshake, certificate).
    #[error("TLS to backend {0} failed: {1}")]
    Tls(SocketAddr, io::Error),
    /// The client's fault: a malformed or aborted request body (400), one that stopped
    /// mid-way (408), or one larger than `max_body_bytes` (413). Never counted against a backend.
    #[error("client fault: {0:?}")]
    Client(ClientFault),
}

impl UpstreamError {
    /// Whose fault this is. Every variant names its source here: a new one cannot be added
    /// without saying whom it blames.
    pub(crate) fn source(&self) -> ErrorSource {
        match self {
            UpstreamError::Connect(..)
            | UpstreamError::ConnectTimeout(_)
            | UpstreamError::HeaderTimeout(_)
            | UpstreamError::Http(..)
            | UpstreamError::Tls(..) => ErrorSource::Upstream,
            UpstreamError::Client(_) => ErrorSource::Downstream,
            UpstreamError::NoBackend | UpstreamError::Full(_) | UpstreamError::RequestTimeout => ErrorSource::Internal,
        }
    }

    /// The status the client gets.
    pub(crate) fn status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            UpstreamError::NoBackend | UpstreamError::Full(_) => S::SERVICE_UNAVAILABLE,
            UpstreamError::Connect(..) | UpstreamError::Http(..) | UpstreamError::Tls(..) => S::BAD_GATEWAY,
            UpstreamError::Client(ClientFault::Broken) => S::BAD_REQUEST,
            UpstreamError::Client(ClientFault::Stalled) => S::REQUEST_TIMEOUT,
            UpstreamError::Client(ClientFault::TooLarge) => S::PAYLOAD_TOO_LARGE,
            UpstreamError::ConnectTimeout(_) | UpstreamError::HeaderTimeout(_) | UpstreamError::RequestTimeout => {
                S::GATEWAY_TIMEOUT
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_backend_failures_are_blamed_on_the_backend() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let io = || io::Error::from(io::ErrorKind::ConnectionRefused);
        let upstream = [
            UpstreamError::Connect(addr, io()),
            UpstreamError::ConnectTimeout(addr),
            UpstreamError::HeaderTimeout(addr),
            UpstreamError::Http(addr, BackendFault::Closed),
            UpstreamError::Tls(addr, io()),
        ];
        for e in &upstream {
            assert_eq!(e.source(), ErrorSource::Upstream, "{e}");
        }
        for fault in [ClientFault::Broken, ClientFault::Stalled, ClientFault::TooLarge] {
            assert_eq!(UpstreamError::Client(fault).source(), ErrorSource::Downstream);
        }
        for e in [UpstreamError::NoBackend, UpstreamError::Full(addr), UpstreamError::RequestTimeout] {
            assert_eq!(e.source(), ErrorSource::Internal, "{e}");
        }
    }
}
