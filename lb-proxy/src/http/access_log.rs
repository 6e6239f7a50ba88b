//! Access log lines (`access_log = true`), one per HTTP request once its response head is
//! known: HAProxy httplog-like text, or JSON (`access_log_format = "json"`). Written with
//! `tracing` at info under the target `access`, so they go where the daemon's log goes. When
//! the process logs JSON itself (`--log-format json`, see [`crate::log_access_as_fields`]),
//! each line is a record of tracing fields, so every field is a JSON field of the log record
//! instead of an escaped string inside its `message`.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

use http::{Method, Response, StatusCode, Uri, Version};

use super::conn::ConnCtx;
use crate::config::AccessLogFormat;

/// Set when the process's log is JSON: access lines are then written as fields.
static AS_FIELDS: AtomicBool = AtomicBool::new(false);

/// Writes every access line from now on as tracing fields (`true`: the process's log is JSON,
/// and `access_log_format` no longer matters) or as one formatted message (`false`, the default).
pub fn log_access_as_fields(on: bool) {
    AS_FIELDS.store(on, Relaxed);
}

/// The backend that answered, put in the response's extensions by the forwarder.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ServedBy(pub(crate) SocketAddr);

/// What is kept of a request until its response.
pub(crate) struct Request {
    method: Method,
    uri: Uri,
    version: Version,
    at: SystemTime,
    /// Its `X-Request-ID` (`request_id = true`).
    id: Option<http::HeaderValue>,
}

impl Request {
    pub(crate) fn of(req: &super::conn::RequestLine, id: Option<http::HeaderValue>) -> Request {
        Request { method: req.method.clone(), uri: req.uri.clone(), version: req.version, at: SystemTime::now(), id }
    }

    fn id(&self) -> Option<&str> {
        self.id.as_ref().and_then(|v| v.to_str().ok())
    }
}

/// One line's fields.
struct Line<'a> {
    client: SocketAddr,
    at: SystemTime,
    vip: &'a str,
    backend: Option<SocketAddr>,
    /// Until the response head (the body streams on).
    elapsed: Duration,
    status: StatusCode,
    /// The response's Content-Length, when it has one.
    bytes: Option<u64>,
    request: &'a Request,
}

/// `elapsed`: from the request's head to its response's head (the handler's one clock read,
/// which the response-time histogram shares).
pub(crate) fn write<B>(request: &Request, resp: &Response<B>, elapsed: Duration, ctx: &ConnCtx) {
    let line = Line {
        client: ctx.client,
        at: request.at,
        vip: &ctx.vip.spec.name,
        backend: resp.extensions().get::<ServedBy>().map(|s| s.0),
        elapsed,
        status: resp.status(),
        bytes: resp.headers().get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok()),
        request,
    };
    if AS_FIELDS.load(Relaxed) {
        return fields(&line);
    }
    let text = match ctx.vip.spec.options.access_log_format {
        AccessLogFormat::Text => text(&line),
        AccessLogFormat::Json => json(&line),
    };
    tracing::info!(target: "access", "{text}");
}

/// The line as tracing fields, of the same names and values as the JSON line; an absent value
/// (no backend, unknown length, no request id) is left out.
fn fields(l: &Line) {
    tracing::info!(
        target: "access",
        client = %l.client,
        time = %humantime::format_rfc3339_millis(l.at),
        vip = l.vip,
        backend = l.backend.map(tracing::field::display),
        duration_ms = l.elapsed.as_millis() as u64,
        status = l.status.as_u16(),
        bytes = l.bytes,
        method = l.request.method.as_str(),
        uri = %l.request.uri,
        version = version(l.request.version),
        request_id = l.request.id(),
    );
}

/// `HTTP/1.1`, `HTTP/2`: as the request line and the text log say it.
fn version(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// `192.0.2.7:40000 [2026-01-02T03:04:05.678Z] web 198.51.100.1:8080 12ms 200 512 "GET / HTTP/1.1"`
/// (`-` for no backend, unknown length), then ` id=...` with `request_id`.
fn text(l: &Line) -> String {
    let id = l.request.id().map(|id| format!(" id={id}")).unwrap_or_default();
    format!(
        "{} [{}] {} {} {}ms {} {} \"{} {} {}\"{id}",
        l.client,
        humantime::format_rfc3339_millis(l.at),
        l.vip,
        l.backend.map_or_else(|| "-".to_string(), |b| b.to_string()),
        l.elapsed.as_millis(),
        l.status.as_u16(),
        l.bytes.map_or_else(|| "-".to_string(), |b| b.to_string()),
        l.request.method,
        l.request.uri,
        version(l.request.version),
    )
}

fn json(l: &Line) -> String {
    serde_json::json!({
        "client": l.client.to_string(),
        "time": humantime::format_rfc3339_millis(l.at).to_string(),
        "vip": l.vip,
        "backend": l.backend.map(|b| b.to_string()),
        "duration_ms": l.elapsed.as_millis() as u64,
        "status": l.status.as_u16(),
        "bytes": l.bytes,
        "method": l.request.method.as_str(),
        "uri": l.request.uri.to_string(),
        "version": version(l.request.version),
        "request_id": l.request.id(),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(request: &Request) -> Line<'_> {
        Line {
            client: "192.0.2.7:40000".parse().unwrap(),
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            vip: "web",
            backend: Some("198.51.100.1:8080".parse().unwrap()),
            elapsed: Duration::from_millis(12),
            status: StatusCode::OK,
            bytes: Some(512),
            request,
        }
    }

    #[test]
    fn text_and_json_lines() {
        let req = super::super::conn::RequestLine::of(http::Request::get("/a?b=c").body(()).unwrap().into_parts().0);
        let request = Request::of(&req, None);
        assert_eq!(
            text(&line(&request)),
            "192.0.2.7:40000 [2023-11-14T22:13:20.123Z] web 198.51.100.1:8080 12ms 200 512 \"GET /a?b=c HTTP/1.1\""
        );
        let value: serde_json::Value = serde_json::from_str(&json(&line(&request))).unwrap();
        assert_eq!(value["status"], 200);
        assert_eq!(value["backend"], "198.51.100.1:8080");
        assert_eq!(value["uri"], "/a?b=c");
        assert_eq!(value["duration_ms"], 12);
        let request = Request::of(&req, Some(http::HeaderValue::from_static("0af7")));
        assert!(text(&line(&request)).ends_with("\"GET /a?b=c HTTP/1.1\" id=0af7"));
        let value: serde_json::Value = serde_json::from_str(&json(&line(&request))).unwrap();
        assert_eq!(value["request_id"], "0af7");
    }
}
