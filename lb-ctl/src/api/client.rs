//! Calling the control API over its Unix socket: what the CLI uses.
use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Method;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;

use super::types::{
    BackendRequest, BackendView, BackendsQuery, Changed, ErrorBody, ExplainRequest, ExplainView, NodeView, PREFIX,
    ReloadView, StatsView, StatusView, VipView,
};

/// A failed call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached (daemon not running, or no permission).
    #[error("cannot reach the daemon at {path}: {source}")]
    Connect {
        path: String,
        #[source]
        source: io::Error,
    },
    /// The daemon refused the request; `message` says why.
    #[error("{message}")]
    Refused { status: u16, message: String },
    /// The exchange failed, or the answer was not understood.
    #[error("control API: {0}")]
    Protocol(String),
}

/// A client of one daemon's control socket.
#[derive(Clone, Debug)]
pub struct Client {
    socket: PathBuf,
}

impl Client {
    pub fn new(socket: impl Into<PathBuf>) -> Client {
        Client { socket: socket.into() }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub async fn status(&self) -> Result<StatusView, ClientError> {
        self.call(Method::GET, "/status", None::<&()>).await
    }
    pub async fn vips(&self) -> Result<Vec<VipView>, ClientError> {
        self.call(Method::GET, "/vips", None::<&()>).await
    }
    pub async fn backends(&self, vip: Option<&str>) -> Result<Vec<BackendView>, ClientError> {
        let path = match vip {
            Some(v) => {
                let query = BackendsQuery { vip: Some(v.to_string()) };
                let query = serde_urlencoded::to_string(&query).map_err(|e| ClientError::Protocol(e.to_string()))?;
                format!("/backends?{query}")
            }
            None => "/backends".into(),
        };
        self.call(Method::GET, &path, None::<&()>).await
    }
    pub async fn add_backend(&self, req: &BackendRequest) -> Result<Changed, ClientError> {
        self.call(Method::POST, "/backends", Some(req)).await
    }
    pub async fn remove_backend(&self, req: &BackendRequest) -> Result<Changed, ClientError> {
        self.call(Method::POST, "/backends/remove", Some(req)).await
    }
    pub async fn drain_backend(&self, req: &BackendRequest) -> Result<Changed, ClientError> {
        self.call(Method::POST, "/backends/drain", Some(req)).await
    }
    pub async fn undrain_backend(&self, req: &BackendRequest) -> Result<Changed, ClientError> {
        self.call(Method::POST, "/backends/undrain", Some(req)).await
    }
    pub async fn stats(&self) -> Result<StatsView, ClientError> {
        self.call(Method::GET, "/stats", None::<&()>).await
    }
    pub async fn explain(&self, req: &ExplainRequest) -> Result<ExplainView, ClientError> {
        self.call(Method::POST, "/explain", Some(req)).await
    }
    pub async fn reload(&self) -> Result<ReloadView, ClientError> {
        self.call(Method::POST, "/reload", None::<&()>).await
    }
    /// `node drain` (true) or `node undrain` (false).
    pub async fn node(&self, drain: bool) -> Result<NodeView, ClientError> {
        let path = if drain { "/node/drain" } else { "/node/undrain" };
        self.call(Method::POST, path, None::<&()>).await
    }

    /// `POST /v1/trace`: the answer's body, a stream of JSON lines that lasts until the
    /// connection closes (dropping the body closes it, which ends the trace).
    pub async fn trace(&self, req: &super::trace::TraceRequest) -> Result<hyper::body::Incoming, ClientError> {
        let (sender, conn) = self.connect().await?;
        // The connection lives as long as the body is read.
        tokio::spawn(conn);
        let response = self.send(sender, Method::POST, &format!("{PREFIX}/trace"), Some(req)).await?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(response.into_body());
        }
        let protocol = |e: hyper::Error| ClientError::Protocol(e.to_string());
        let bytes = response.into_body().collect().await.map_err(protocol)?.to_bytes();
        Err(refused(status, &bytes))
    }

    /// One request on a new connection; `path` is under `/v1`.
    pub async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, ClientError> {
        let (status, bytes) = self.raw(method, &format!("{PREFIX}{path}"), body).await?;
        if (200..300).contains(&status) {
            serde_json::from_slice(&bytes).map_err(|e| ClientError::Protocol(format!("unexpected answer: {e}")))
        } else {
            Err(refused(status, &bytes))
        }
    }

    /// One request to any path; the status and the body of the answer.
    pub async fn raw<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<(u16, Bytes), ClientError> {
        let (sender, conn) = self.connect().await?;
        let conn = tokio::spawn(conn);
        let response = self.send(sender, method, path, body).await?;
        let protocol = |e: hyper::Error| ClientError::Protocol(e.to_string());
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.map_err(protocol)?.to_bytes();
        conn.abort();
        Ok((status, bytes))
    }

    async fn connect(&self) -> Result<(Sender, Connection), ClientError> {
        let stream = UnixStream::connect(&self.socket)
            .await
            .map_err(|source| ClientError::Connect { path: self.socket.display().to_string(), source })?;
        hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))
    }

    async fn send<B: Serialize>(
        &self,
        mut sender: Sender,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, ClientError> {
        let body = match body {
            Some(b) => Bytes::from(serde_json::to_vec(b).map_err(|e| ClientError::Protocol(e.to_string()))?),
            None => Bytes::new(),
        };
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "lb-ctl")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        sender.send_request(request).await.map_err(|e| ClientError::Protocol(e.to_string()))
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;
type Connection = hyper::client::conn::http1::Connection<TokioIo<UnixStream>, Full<Bytes>>;

/// A refusal's message, from its `{"error": ...}` body.
fn refused(status: u16, bytes: &[u8]) -> ClientError {
    let message = match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(b) => b.error,
        Err(_) => format!("HTTP {status}: {}", String::from_utf8_lossy(bytes).trim()),
    };
    ClientError::Refused { status, message }
}
