//! Serving the control API: an axum router over the Unix socket (and the optional loopback TCP
//! port), JSON in and out, each request handed to the [`Service`] (the daemon's writer).
//!
//! The accept loop is ours rather than `axum::serve`'s: it checks the peer's credentials,
//! bounds how long a client may take to send its header, and caps the connections held at
//! once, so a client that opens many connections and sends nothing cannot exhaust the
//! daemon's file descriptors; at the cap a new connection takes the place of the oldest idle
//! one ([`super::admission`]), so such a client cannot lock the operator's CLI out either.
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{OriginalUri, Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::Json;
use axum::routing::{MethodRouter, get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde::de::DeserializeOwned;
use tokio::net::{TcpListener, UnixListener};

use super::admission::{Admission, Admitted, BusyMarker};
use super::status_page;
use super::types::{BackendsQuery, PREFIX};
use super::{ApiError, Request, Response, Service};
use crate::paths;

/// Largest request body accepted.
const MAX_BODY: usize = 64 * 1024;

/// Limits of the API's connections.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A client must send a whole request header within this (also bounds idle keep-alive).
    pub header_timeout: Duration,
    /// Most connections held at once; past it a new one closes the oldest idle one (or is
    /// closed itself when every connection is busy with a request).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { header_timeout: Duration::from_secs(10), max_connections: 256 }
    }
}

/// A bound control socket, and the lock that says a live daemon serves it.
#[derive(Debug)]
pub struct ControlSocket {
    pub listener: UnixListener,
    /// An exclusive `flock` on `PATH.lock`, held for the daemon's life: the kernel lets go of
    /// it when the process dies, however it dies.
    _lock: std::fs::File,
}

/// Binds the control socket at `path`: creates its directory (mode 0700) if missing, refuses
/// the socket of a live daemon, replaces the one a dead daemon left, and makes the socket mode
/// 0600 (owner only; the daemon runs as root).
///
/// Which daemon is alive is told by a lock, not by connecting: right after a kill -9 the dead
/// daemon's socket may still accept for a moment, and a restart must not fail on it.
pub fn bind_unix(path: &Path) -> io::Result<ControlSocket> {
    use std::os::fd::AsRawFd as _;
    if let Some(dir) = path.parent() {
        paths::create_private_dir(dir)?;
    }
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path)?;
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!(
                "{} is served by a running daemon: stop it, or give this one another control socket \
                 (`lb-ctl --socket PATH proxy ...`, or `api_socket` in the file's [daemon])",
                path.display()
            ),
        ));
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    paths::make_private(path)?;
    Ok(ControlSocket { listener, _lock: lock })
}

/// Whether a peer may use the API: root, or the user the daemon runs as.
fn peer_allowed(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    uid == 0 || uid == unsafe { libc::geteuid() }
}

/// The API's routes over `service`.
pub fn router<S: Service>(service: S) -> Router {
    let routes = Router::new()
        .route("/status", only("GET", get(|State(s): State<S>| call(s, Request::Status))))
        .route("/vips", only("GET", get(|State(s): State<S>| call(s, Request::Vips))))
        .route("/stats", only("GET", get(|State(s): State<S>| call(s, Request::Stats))))
        .route("/events", only("GET", get(|State(s): State<S>| call(s, Request::Events))))
        .route("/reload", only("POST", post(|State(s): State<S>| call(s, Request::Reload))))
        .route("/node/drain", only("POST", post(|State(s): State<S>| call(s, Request::Node { drain: true }))))
        .route("/node/undrain", only("POST", post(|State(s): State<S>| call(s, Request::Node { drain: false }))))
        .route("/metrics", only("GET", get(metrics::<S>)))
        .route(
            "/backends",
            only("POST", get(backends::<S>).post(|State(s): State<S>, body: Bytes| with_body(s, body, Request::Add))),
        )
        .route(
            "/backends/remove",
            only("POST", post(|State(s): State<S>, body: Bytes| with_body(s, body, Request::Remove))),
        )
        .route(
            "/backends/drain",
            only("POST", post(|State(s): State<S>, body: Bytes| with_body(s, body, Request::Drain))),
        )
        .route(
            "/backends/undrain",
            only("POST", post(|State(s): State<S>, body: Bytes| with_body(s, body, Request::Undrain))),
        )
        .route("/explain", only("POST", post(|State(s): State<S>, body: Bytes| with_body(s, body, Request::Explain))))
        .route("/trace", only("POST", post(|State(s): State<S>, body: Bytes| trace::<S>(s, body))));
    Router::new().nest(PREFIX, routes).fallback(no_such_endpoint).with_state(service)
}

/// The metrics port's routes, all read-only (no control API): `GET /metrics`, and the status
/// page (`GET /`, with its data as `GET /status.json`).
pub fn metrics_router<S: Service>(service: S) -> Router {
    Router::new()
        .route("/metrics", only("GET", get(metrics::<S>)))
        .route("/", only("GET", get(status_page::page::<S>)))
        .route("/status.json", only("GET", get(status_page::json::<S>)))
        .fallback(no_such_endpoint)
        .with_state(service)
}

/// Answers a method the route does not take.
fn only<S: Service>(takes: &'static str, route: MethodRouter<S>) -> MethodRouter<S> {
    route.fallback(move |method: Method, OriginalUri(uri): OriginalUri| async move {
        Err::<(), _>(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{} takes {takes}, not {method}", uri.path()),
        ))
    })
}

async fn no_such_endpoint(uri: Uri) -> ApiError {
    let path = uri.path();
    if path.starts_with(&format!("{PREFIX}/")) {
        ApiError::not_found(format!("no such endpoint: {path}"))
    } else {
        ApiError::not_found(format!("no such endpoint: {path} (the API lives under {PREFIX}/)"))
    }
}

type Answer = Result<Json<serde_json::Value>, ApiError>;

async fn call<S: Service>(service: S, request: Request) -> Answer {
    service.call(request).await.map(|r| Json(r.to_json()))
}

/// A request whose parameters are the JSON body.
async fn with_body<S: Service, T: DeserializeOwned>(service: S, body: Bytes, request: fn(T) -> Request) -> Answer {
    call(service, request(json_body(&body)?)).await
}

/// `POST /v1/trace`: a stream, not one JSON answer (see `super::trace`).
async fn trace<S: Service>(service: S, body: Bytes) -> Result<axum::response::Response, ApiError> {
    super::trace::stream(service, json_body(&body)?).await
}

/// The metrics, as Prometheus scrapes them.
async fn metrics<S: Service>(State(service): State<S>) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse as _;
    match service.call(Request::Metrics).await? {
        Response::Metrics(text) => Ok((
            [(axum::http::header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
            text,
        )
            .into_response()),
        _ => Err(ApiError::internal("unexpected answer to a metrics request")),
    }
}

async fn backends<S: Service>(
    State(service): State<S>,
    query: Result<Query<BackendsQuery>, axum::extract::rejection::QueryRejection>,
) -> Answer {
    let Query(query) = query.map_err(|e| ApiError::bad_request(format!("malformed query: {}", e.body_text())))?;
    call(service, Request::Backends { vip: query.vip }).await
}

fn json_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.len() > MAX_BODY {
        return Err(ApiError::bad_request(format!("request body over {MAX_BODY} bytes")));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
}

/// Serves the API until `shutdown` resolves, then lets requests in progress finish.
pub async fn serve<S: Service>(
    service: S,
    unix: UnixListener,
    tcp: Option<TcpListener>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let router = router(service).layer(axum::extract::DefaultBodyLimit::max(MAX_BODY));
    let admission = Admission::new(limits.max_connections);
    let unix_path = unix.local_addr().ok().and_then(|a| a.as_pathname().map(Path::to_path_buf));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = unix.accept() => match accepted {
                Ok((stream, _)) => {
                    match stream.peer_cred() {
                        Ok(cred) if peer_allowed(cred.uid()) => {}
                        Ok(cred) => {
                            tracing::warn!(uid = cred.uid(), "control socket: refused a connection from a non-root user");
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "control socket: no peer credentials; refused");
                            continue;
                        }
                    }
                    connection(&graceful, &router, &admission, limits, stream);
                }
                Err(e) => tracing::warn!(error = %e, "control socket: accept failed"),
            },
            accepted = accept_tcp(tcp.as_ref()) => match accepted {
                Ok((stream, _)) => connection(&graceful, &router, &admission, limits, stream),
                Err(e) => tracing::warn!(error = %e, "admin TCP port: accept failed"),
            },
        }
    }
    drop(unix);
    if let Some(path) = unix_path {
        let _ = std::fs::remove_file(path);
    }
    // Requests in progress get a moment to finish.
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
}

async fn accept_tcp(tcp: Option<&TcpListener>) -> io::Result<(tokio::net::TcpStream, std::net::SocketAddr)> {
    match tcp {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

fn connection<St>(graceful: &GracefulShutdown, router: &Router, admission: &Arc<Admission>, limits: Limits, stream: St)
where
    St: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Some((ticket, admitted)) = admission.admit() else {
        tracing::warn!(limit = limits.max_connections, "control API: every connection busy; closed a new one");
        return;
    };
    if admitted == Admitted::ClosedOldestIdle {
        tracing::warn!(
            limit = limits.max_connections,
            "control API: too many connections; closed the oldest idle one for a new one"
        );
    }
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(TokioIo::new(stream), marking_requests(router.clone(), ticket.busy_marker()));
    let conn = graceful.watch(conn);
    let id = ticket.id();
    let task = tokio::spawn(async move {
        // The task owns the ticket: it is given back when the task ends or is aborted.
        let _ticket = ticket;
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "control API connection ended with an error");
        }
    });
    admission.serving(id, task.abort_handle());
}

/// The router as one connection's service, its requests marked in progress while they run
/// (a connection with none is idle, and may give way to a new one).
fn marking_requests(
    router: Router,
    marker: BusyMarker,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future: Send,
> + Clone {
    let inner = TowerToHyperService::new(router);
    hyper::service::service_fn(move |request| {
        let busy = marker.request();
        let answer = hyper::service::Service::call(&inner, request);
        async move {
            let answer = answer.await;
            drop(busy);
            answer
        }
    })
}
