//! One request: validate, rewrite, pick a backend, send (retrying where safe), stream back.
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use http::{Method, Response, StatusCode, Uri};
use http_body_util::BodyExt;

use super::access_log::{self, ServedBy};
use super::body::{InFlight, ProxyBody, ROOM_AFTER, Tunnel, UpstreamBody, backend_fields_into_map};
use super::budget::{Budget, Late};
use super::conn::{ConnCtx, IncomingBody, RequestLine};
use super::fields::{EditFields, Fields};
use super::headers::{self, cookie, is_upgrade};
use super::request_id;
use super::respond::error_response;
use super::upload::{RequestBody, Upload};
use super::upstream::{self, ResponseBody};
use super::validate::refuse;
use crate::backend::Backend;
use crate::config::{Balance, HashKey};
use crate::error::{ErrorSource, UpstreamError};
use crate::pool::{UpBody, open_http};

/// Handles one request: `parts` (method, target, version) and `fields`, an h2 request's map or
/// an HTTP/1 request's fields as ranges into its head.
pub(crate) async fn handle<B: IncomingBody, F: EditFields>(
    parts: RequestLine,
    mut fields: F,
    body: B,
    ctx: &ConnCtx,
) -> Response<ProxyBody> {
    let id = ctx.vip.spec.options.request_id.then(|| request_id::ensure(&mut fields));
    let logged = ctx.vip.spec.options.access_log.then(|| access_log::Request::of(&parts, id.clone()));
    let started = std::time::Instant::now();
    let mut resp = forward(parts, fields, body, ctx).await;
    if !ctx.vip.response_headers.is_empty() || id.is_some() || logged.is_some() {
        backend_fields_into_map(&mut resp, false);
    }
    apply(&ctx.vip.response_headers, resp.headers_mut());
    if let Some(id) = id {
        resp.headers_mut().insert(request_id::HEADER, id);
    }
    let took = started.elapsed();
    ctx.vip.counters.responded(resp.status(), took);
    if let Some(request) = logged {
        access_log::write(&request, &resp, took, ctx);
    }
    resp
}

async fn forward<B: IncomingBody, F: EditFields>(
    mut parts: RequestLine,
    mut fields: F,
    body: B,
    ctx: &ConnCtx,
) -> Response<ProxyBody> {
    if let Some(rate) = &ctx.vip.per_client_rate
        && let Err(wait) = rate.check(ctx.client.ip())
    {
        ctx.vip.counters.rejected.fetch_add(1, Relaxed);
        ctx.vip.counters.clients_limited.fetch_add(1, Relaxed);
        return too_many_requests(wait);
    }
    if let Some(refusal) = refuse(&parts, &fields, body.size_hint().exact(), ctx) {
        ctx.vip.counters.rejected.fetch_add(1, Relaxed);
        ctx.vip.counters.client_errors.fetch_add(1, Relaxed);
        return refusal;
    }
    if let Some(status) = ctx.vip.spec.options.https_redirect {
        return https_redirect(status, &parts.uri, &fields);
    }
    let spec = &ctx.vip.spec;
    let opts = &spec.options;
    let upgrade = is_upgrade(parts.version, &fields);
    let hash = request_hash(&opts.balance, &fields, ctx.client_hash);
    let proto = if ctx.https { "https" } else { "http" };
    headers::prepare_request(&mut parts, &mut fields, ctx.client, &opts.forwarded, upgrade, proto);
    apply(&ctx.vip.request_headers, &mut fields);
    let target = Target {
        route: route_of(&ctx.vip, &parts.uri, &fields),
        hash,
        sticky: opts.sticky_cookie.as_deref().and_then(|name| sticky_token(&fields, name)),
    };

    // Asked once: an h2 body answers under its connection's lock.
    let bodiless = body.is_end_stream();
    // Only a request that can be sent again as-is may be retried after it left: idempotent
    // and bodiless (a streamed body is gone once sent).
    let replayable = is_idempotent(&parts.method) && bodiless && !upgrade;
    // A body that has ended already (most requests have none) needs no watching: no shared
    // upload state, and an empty body boxed is no allocation.
    let ended = Upload::already_ended();
    let (body, watched) = if bodiless {
        (http_body_util::Empty::new().map_err(|never| match never {}).boxed(), None)
    } else {
        let (body, upload) = RequestBody::new(body, opts.timeouts.body, opts.limits.max_body_bytes.map(|n| n.get()));
        (body.boxed(), Some(upload))
    };
    let upload = watched.as_deref().unwrap_or(&ended);
    let mut up = upstream::OutRequest { method: parts.method, uri: parts.uri, body };

    // Biased: the branches are polled in order, without a random draw for every wake-up.
    let result = tokio::select! {
        biased;
        r = attempts(&mut up, &fields, replayable, &target, ctx, upgrade, upload) => r,
        // Mid-upload, the backend must keep reading: one that stops gets the body timeout.
        _ = upload.backend_stopped_reading(opts.timeouts.body) => Err(UpstreamError::RequestTimeout),
    };
    match result {
        Ok((resp, in_flight)) => finish_response(resp, in_flight, upgrade, target.sticky, ctx, fields.into_spare_map()),
        Err(e) => {
            tracing::debug!(vip = %spec.name, client = %ctx.client, error = %e, "request failed");
            match (e.source(), &e) {
                (ErrorSource::Internal, UpstreamError::NoBackend | UpstreamError::Full(_)) => {
                    ctx.vip.counters.rejected.fetch_add(1, Relaxed);
                }
                (ErrorSource::Downstream, _) => {
                    ctx.vip.counters.client_errors.fetch_add(1, Relaxed);
                }
                _ => {}
            }
            // After a broken upload the connection's framing is lost: close it.
            let close = e.source() == ErrorSource::Downstream;
            error_response(e.status(), close)
        }
    }
}

/// Where a request may go: its route (None: the VIP's own backends), its consistent-hash key's
/// hash, and the backend its sticky cookie names.
struct Target {
    route: Option<usize>,
    hash: u32,
    sticky: Option<u32>,
}

/// The backend token in the request's sticky cookie, if it carries a well-formed one.
fn sticky_token(headers: &impl Fields, name: &str) -> Option<u32> {
    headers::cookie(headers, name).and_then(|v| u32::from_str_radix(v, 16).ok())
}

/// `Set-Cookie` naming `token` (a session cookie, for the whole site, out of scripts' reach;
/// `Secure` when the client came over TLS).
fn sticky_cookie(name: &str, token: u32, https: bool) -> Option<http::HeaderValue> {
    let secure = if https { "; Secure" } else { "" };
    http::HeaderValue::from_str(&format!("{name}={token:08x}; Path=/; HttpOnly{secure}")).ok()
}

/// The VIP route that takes the request, by its host and path: None for the VIP's own backends.
fn route_of(vip: &crate::vip::Vip, uri: &Uri, fields: &impl Fields) -> Option<usize> {
    if vip.routes.is_empty() {
        return None;
    }
    vip.route(headers::request_host(uri, fields), uri.path())
}

/// Sets and removes the configured header fields.
fn apply(rules: &crate::config::HeaderRules, headers: &mut impl EditFields) {
    for (name, value) in rules {
        match value {
            Some(v) => headers.set(name.clone(), v.clone()),
            None => headers.remove(name),
        }
    }
}

/// The same URL over HTTPS (Host without its port, so port 443), with `status`.
fn https_redirect(status: u16, uri: &Uri, fields: &impl Fields) -> Response<ProxyBody> {
    // Without a host (an HTTP/1.0 request) there is nowhere to send the client.
    let Some(host) = headers::request_host(uri, fields).filter(|h| !h.is_empty()) else {
        return error_response(StatusCode::BAD_REQUEST, false);
    };
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(location) = http::HeaderValue::from_str(&format!("https://{host}{target}")) else {
        return error_response(StatusCode::BAD_REQUEST, false);
    };
    let mut resp = Response::new(ProxyBody::full(String::new()));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::PERMANENT_REDIRECT);
    resp.headers_mut().insert(http::header::LOCATION, location);
    resp
}

/// 429 to a client past its request rate, saying when it may come back (whole seconds, at
/// least 1). The connection stays open: the request itself was well formed.
fn too_many_requests(wait: std::time::Duration) -> Response<ProxyBody> {
    let mut resp = error_response(StatusCode::TOO_MANY_REQUESTS, false);
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    resp.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds.max(1)));
    resp
}

fn is_idempotent(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE)
}

fn request_hash(balance: &Balance, headers: &impl Fields, client_hash: u32) -> u32 {
    let Balance::ConsistentHash { key } = balance else {
        return client_hash;
    };
    let value = match key {
        HashKey::ClientIp => None,
        HashKey::Header(name) => headers.first_named(name),
        HashKey::Cookie(name) => cookie(headers, name).map(str::as_bytes),
    };
    value.map_or(client_hash, |v| lb_common::hash::bytes_hash(v, 0) as u32)
}

/// Tries backends until one answers with a response head, within the retry bound.
async fn attempts(
    req: &mut upstream::OutRequest<UpBody>,
    fields: &impl Fields,
    replayable: bool,
    target: &Target,
    ctx: &ConnCtx,
    upgrade: bool,
    upload: &Upload,
) -> Result<(Response<ResponseBody>, InFlight), UpstreamError> {
    let spec = &ctx.vip.spec;
    let opts = &spec.options;
    // Backends that failed this request (pushed on failure: most requests allocate none).
    let mut tried: Vec<SocketAddr> = Vec::new();
    let mut last = UpstreamError::NoBackend;
    let mut budget = Budget::new(opts.timeouts.request);
    // A response retried elsewhere (`retries.on_status`), answered if no other backend is left.
    let mut kept: Option<(Response<ResponseBody>, InFlight)> = None;
    for attempt in 0..=opts.retries.max {
        // The backend the client's sticky cookie names, while it may take requests; then the
        // balancer's choice (retries too).
        let sticky = target.sticky.filter(|_| attempt == 0).and_then(|t| ctx.vip.sticky(target.route, t, &tried));
        let Some(backend) = sticky.or_else(|| ctx.vip.pick_in_route(target.route, target.hash, &tried)) else {
            break;
        };
        if attempt > 0 {
            ctx.vip.counters.retries.fetch_add(1, Relaxed);
        }
        let slot = match backend.gate.admit(opts.timeouts.queue, budget.end(upload)).await {
            Ok(s) => s,
            Err(_) if budget.spent() => return Err(UpstreamError::RequestTimeout),
            Err(_) => {
                last = UpstreamError::Full(backend.addr);
                tried.push(backend.addr);
                continue;
            }
        };
        let active = backend.begin();
        match send(&backend, req, fields, ctx, upload, &mut budget, upgrade, replayable).await {
            Ok(resp) => {
                if resp.status().is_server_error() {
                    backend.counters.error();
                    backend.record_failure(&opts.outlier);
                } else {
                    backend.outlier.record_success();
                }
                let pool_tag = ctx.proxy_header.as_ref().map(|_| ctx.client);
                let in_flight = InFlight { active, slot, pool_tag, vip: ctx.vip.clone() };
                let retry = replayable
                    && attempt < opts.retries.max
                    && opts.retries.on_status.contains(&resp.status().as_u16());
                if !retry {
                    return Ok((resp, in_flight));
                }
                tracing::debug!(backend = %backend.addr, status = %resp.status(), "retrying elsewhere");
                tried.push(backend.addr);
                // The one kept before is dropped (its backend connection closes unread).
                kept = Some((resp, in_flight));
                continue;
            }
            // Not the backend's (the budget is the request's): no retry, no blame.
            Err((e, _)) if e.source() != ErrorSource::Upstream => return Err(e),
            Err((e, unsent)) => {
                // A failure the client's upload caused is the client's: no retry, no blame.
                if let Some(fault) = upload.fault() {
                    return Err(UpstreamError::Client(fault));
                }
                backend.counters.error();
                backend.record_failure(&opts.outlier);
                tracing::debug!(backend = %backend.addr, error = %e, "attempt failed");
                last = e;
                tried.push(backend.addr);
                if !(unsent || replayable) {
                    break;
                }
            }
        }
    }
    match kept {
        Some(answer) => Ok(answer),
        None => Err(last),
    }
}

/// One attempt on one backend. On failure, says whether the request was never sent (so any
/// request may be retried then).
#[allow(clippy::too_many_arguments)]
async fn send(
    backend: &Arc<Backend>,
    req: &mut upstream::OutRequest<UpBody>,
    fields: &impl Fields,
    ctx: &ConnCtx,
    upload: &Upload,
    budget: &mut Budget,
    upgrade: bool,
    replayable: bool,
) -> Result<Response<ResponseBody>, (UpstreamError, bool)> {
    let t = &ctx.vip.spec.options.timeouts;
    let tag = ctx.proxy_header.as_ref().map(|_| ctx.client);
    // Pooled connections may have been closed by the backend meanwhile; such a failure before
    // the request was written costs nothing, so try the next one (bounded by the pool size),
    // then a fresh connection. So may a request that can be sent again as it is, when the
    // backend closed a reused connection without a byte of answer: it was not served.
    loop {
        let (conn, pooled) = match backend.pool().take(tag) {
            Some(c) => (c, true),
            None => {
                let dial = ctx.vip.dial();
                // Boxed: connecting (TLS included) is the largest state of a request's future,
                // and most requests take a pooled connection instead.
                let opening = Box::pin(open_http(backend.addr, &dial, ctx.proxy_header.as_deref()));
                // Connecting counts against a budget already running (its own timeout aside).
                let opened = match budget.end(upload) {
                    Some(at) => {
                        tokio::time::timeout_at(at, opening).await.unwrap_or(Err(UpstreamError::RequestTimeout))
                    }
                    None => opening.await,
                };
                match opened {
                    Ok(c) => (c, false),
                    Err(e) => return Err((e, true)),
                }
            }
        };
        let sent = tokio::select! {
            biased;
            r = upstream::send(conn, req, fields, upgrade) => Ok(r),
            late = budget.answer_due(upload, t.backend_header) => Err(late),
        };
        match sent {
            Ok(Ok(resp)) => return Ok(resp),
            Ok(Err(f)) if pooled && (f.unsent || (f.silent && replayable)) => continue,
            Ok(Err(f)) => return Err((UpstreamError::Http(backend.addr, f.fault), f.unsent)),
            Err(Late::Backend) => return Err((UpstreamError::HeaderTimeout(backend.addr), false)),
            Err(Late::Request) => return Err((UpstreamError::RequestTimeout, false)),
        }
    }
}

/// A backend response's fields, hop-by-hop ones included, into its (still empty) map.
fn fields_into_map(resp: &mut Response<ResponseBody>) {
    if let Some(map) = resp.body_mut().take_fields(true, http::HeaderMap::new(), ROOM_AFTER) {
        // The names and values were checked as the head was parsed: none fails here.
        *resp.headers_mut() = map.unwrap_or_default();
    }
}

fn finish_response(
    resp: Response<ResponseBody>,
    in_flight: InFlight,
    upgrade: bool,
    asked_for: Option<u32>,
    ctx: &ConnCtx,
    spare: Option<http::HeaderMap>,
) -> Response<ProxyBody> {
    let mut resp = resp;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS && upgrade {
        // The HTTP/1 connection writes this head, then joins the client to the backend.
        fields_into_map(&mut resp);
        let (mut parts, mut body) = resp.into_parts();
        let tunnel = body.take_upgraded().map(|backend| Tunnel { backend, hold: in_flight });
        headers::prepare_response(&mut parts, true);
        return Response::from_parts(parts, ProxyBody::Tunnel(tunnel));
    }
    // The hop-by-hop fields are left out as the fields are written (or moved into a map);
    // those a Connection option names too are removed from a map made for it here.
    if resp.body().raw_fields().is_some_and(|f| f.present().connection && f.present().options.names_others) {
        fields_into_map(&mut resp);
    }
    let (mut parts, body) = resp.into_parts();
    // The request's map, emptied, for the fields a map is made of later (an h2 client's, or
    // rules'): a map it spares making, and the request's freeing.
    if let Some(spare) = spare
        && parts.headers.is_empty()
    {
        parts.headers = spare;
    }
    headers::prepare_response(&mut parts, false);
    // A client whose cookie does not name the backend that answered is given one that does.
    let token = in_flight.active.0.sticky_token;
    if let Some(name) = &ctx.vip.spec.options.sticky_cookie
        && asked_for != Some(token)
        && let Some(cookie) = sticky_cookie(name, token, ctx.https)
    {
        parts.headers.append(http::header::SET_COOKIE, cookie);
    }
    // Only the access log reads it (an extension costs a map allocation per response).
    if ctx.vip.spec.options.access_log {
        parts.extensions.insert(ServedBy(in_flight.active.0.addr));
    }
    Response::from_parts(parts, ProxyBody::Upstream(UpstreamBody::new(body, in_flight)))
}
