//! What the requests of one client connection share, and what their bodies may be: below
//! `forward` (which handles a request) and the server, log and validation code that use them.
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Uri, Version};
use http_body::Body;

use crate::error::BoxError;
use crate::vip::Vip;

/// What every request of one client connection shares.
pub(crate) struct ConnCtx {
    pub(crate) vip: Arc<Vip>,
    pub(crate) client: SocketAddr,
    /// `client_hash` of the client address: the consistent-hash key by default (0 when the
    /// VIP does not balance by a hash).
    pub(crate) client_hash: u32,
    /// The PROXY header for this client's backend connections, if the VIP sends one.
    pub(crate) proxy_header: Option<Vec<u8>>,
    /// The client spoke TLS to the proxy.
    pub(crate) https: bool,
}

impl ConnCtx {
    pub(crate) fn new(vip: &Arc<Vip>, client: SocketAddr, https: bool) -> Self {
        let spec = &vip.spec;
        // Read only by consistent hashing (`forward::request_hash`): other balancers pick
        // without it.
        let hashed = matches!(spec.options.balance, crate::config::Balance::ConsistentHash { .. });
        ConnCtx {
            vip: vip.clone(),
            client,
            client_hash: if hashed {
                lb_common::hash::client_hash(&lb_common::ip_bytes(client.ip()).0, spec.hash_seed)
            } else {
                0
            },
            proxy_header: crate::proxy_protocol::header(spec.options.proxy_protocol, client, vip.local_addr),
            https,
        }
    }
}

/// A request's method, target and version: what forwarding reads of its head besides the
/// fields. Smaller than `http::request::Parts` (no map, no extensions), so cheaper to move
/// as a request's future is built.
pub(crate) struct RequestLine {
    pub(crate) method: Method,
    pub(crate) uri: Uri,
    pub(crate) version: Version,
}

impl RequestLine {
    /// From an h2 request's parts, whose fields have been taken.
    pub(crate) fn of(parts: http::request::Parts) -> Self {
        RequestLine { method: parts.method, uri: parts.uri, version: parts.version }
    }
}

/// What a request's body may be: hyper's (h2) or the HTTP/1 connection's own.
pub(crate) trait IncomingBody:
    Body<Data = Bytes, Error: Into<BoxError>> + Send + Sync + Unpin + 'static
{
}
impl<B: Body<Data = Bytes, Error: Into<BoxError>> + Send + Sync + Unpin + 'static> IncomingBody for B {}
