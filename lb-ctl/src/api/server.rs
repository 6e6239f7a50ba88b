//! Serving the control API: HTTP/1.1 over the Unix socket (and the optional loopback TCP
//! port), JSON in and out, each request handed to the daemon's writer.
use std::convert::Infallible;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use serde::de::DeserializeOwned;
use tokio::net::{TcpListener, UnixListener};

use super::types::{BackendRequest, ErrorBody, ExplainRequest, PREFIX};
use super::{ApiError, ErrorKind};
use crate::daemon::{DaemonHandle, Request};

/// Largest request body accepted.
const MAX_BODY: usize = 64 * 1024;

/// Binds the control socket at `path`: creates its directory (mode 0700) if missing, removes a
/// stale socket left by a dead daemon, refuses to take over the socket of a live one, and
/// makes the socket mode 0600 (owner only; the daemon runs as root).
pub fn bind_unix(path: &Path) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent()
        && !dir.exists()
    {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{} is served by a running daemon", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Whether a peer may use the API: root, or the user the daemon runs as.
fn peer_allowed(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    uid == 0 || uid == unsafe { libc::geteuid() }
}

/// Serves the API until `shutdown` resolves, then lets requests in progress finish.
pub async fn serve(
    handle: DaemonHandle,
    unix: UnixListener,
    tcp: Option<TcpListener>,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
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
                    connection(&graceful, handle.clone(), stream);
                }
                Err(e) => tracing::warn!(error = %e, "control socket: accept failed"),
            },
            accepted = accept_tcp(tcp.as_ref()) => match accepted {
                Ok((stream, _)) => connection(&graceful, handle.clone(), stream),
                Err(e) => tracing::warn!(error = %e, "admin TCP port: accept failed"),
            },
        }
    }
    drop(unix);
    if let Some(path) = unix_path {
        let _ = std::fs::remove_file(path);
    }
    // Requests in progress get a moment to finish.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), graceful.shutdown()).await;
}

async fn accept_tcp(tcp: Option<&TcpListener>) -> io::Result<(tokio::net::TcpStream, std::net::SocketAddr)> {
    match tcp {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

fn connection<S>(graceful: &GracefulShutdown, handle: DaemonHandle, stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let handle = handle.clone();
        async move { Ok::<_, Infallible>(respond(&handle, req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    let conn = graceful.watch(conn);
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "control API connection ended with an error");
        }
    });
}

async fn respond(handle: &DaemonHandle, req: hyper::Request<Incoming>) -> hyper::Response<Full<Bytes>> {
    let answer = match route(req).await {
        Ok(request) => handle.call(request).await.map(|r| r.to_json()),
        Err(e) => Err(e),
    };
    match answer {
        Ok(json) => reply(StatusCode::OK, &json),
        Err(e) => {
            let status = StatusCode::from_u16(e.kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            reply(status, &ErrorBody { error: e.message })
        }
    }
}

fn reply(status: StatusCode, body: &impl serde::Serialize) -> hyper::Response<Full<Bytes>> {
    let mut bytes = serde_json::to_vec_pretty(body).expect("API views serialize to JSON");
    bytes.push(b'\n');
    hyper::Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(bytes)))
        .expect("a response with a valid status and header")
}

/// The writer request an HTTP request stands for.
async fn route(req: hyper::Request<Incoming>) -> Result<Request, ApiError> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().map(str::to_owned);
    let Some(rest) = path.strip_prefix(PREFIX) else {
        return Err(ApiError::new(
            ErrorKind::NotFound,
            format!("no such endpoint: {path} (the API lives under {PREFIX}/)"),
        ));
    };
    let expect = |want: Method| -> Result<(), ApiError> {
        if method == want {
            Ok(())
        } else {
            Err(ApiError::new(ErrorKind::MethodNotAllowed, format!("{path} takes {want}, not {method}")))
        }
    };
    match rest {
        "/status" => expect(Method::GET).map(|()| Request::Status),
        "/vips" => expect(Method::GET).map(|()| Request::Vips),
        "/stats" => expect(Method::GET).map(|()| Request::Stats),
        "/backends" if method == Method::GET => {
            let vip = query.as_deref().map(|q| query_param(q, "vip")).transpose()?.flatten();
            Ok(Request::Backends { vip })
        }
        "/backends" => {
            expect(Method::POST)?;
            Ok(Request::Add(body::<BackendRequest>(req).await?))
        }
        "/backends/remove" => {
            expect(Method::POST)?;
            Ok(Request::Remove(body::<BackendRequest>(req).await?))
        }
        "/backends/drain" => {
            expect(Method::POST)?;
            Ok(Request::Drain(body::<BackendRequest>(req).await?))
        }
        "/explain" => {
            expect(Method::POST)?;
            Ok(Request::Explain(body::<ExplainRequest>(req).await?))
        }
        "/reload" => expect(Method::POST).map(|()| Request::Reload),
        _ => Err(ApiError::new(ErrorKind::NotFound, format!("no such endpoint: {path}"))),
    }
}

async fn body<T: DeserializeOwned>(req: hyper::Request<Incoming>) -> Result<T, ApiError> {
    let bytes = Limited::new(req.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?
        .to_bytes();
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
}

/// The value of `name` in a query string (percent-decoded).
fn query_param(query: &str, name: &str) -> Result<Option<String>, ApiError> {
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == name {
            return percent_decode(v).map(Some);
        }
    }
    Ok(None)
}

fn percent_decode(s: &str) -> Result<String, ApiError> {
    let bad = || ApiError::bad_request(format!("malformed query value {s:?}"));
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'%' => {
                let hex = [bytes.next().ok_or_else(bad)?, bytes.next().ok_or_else(bad)?];
                let hex = std::str::from_utf8(&hex).map_err(|_| bad())?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// Percent-encodes a query value (for the client).
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
