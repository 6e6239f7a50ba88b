//! lb-proxy: the userspace L7 (HTTP) and TCP proxy for the targets the XDP data plane does not
//! serve (`protocol = "http"` VIPs, and TCP VIPs with `forwarding = "proxy"`). A library: the
//! `lb-ctl` daemon runs it in-process, sharing its config, health checker and backend state;
//! `lb-ctl proxy` runs it without XDP. lb.toml's `[vip.proxy]` table is a [`ProxyOptions`].
//!
//! It serves thread per core: each worker thread runs a single-threaded runtime, and a client
//! connection stays on one worker together with the backend connections serving it.
//!
//! Start with [`Proxy::start`] (or [`Proxy::start_with_listeners`] for sockets bound by the
//! caller), then steer it through the [`ProxyHandle`].
//!
//! The modules:
//! - `proxy`: the entry points and the handle; `workers`: the worker threads; `accept`:
//!   accepting and admitting client connections; `vip`: a running VIP.
//! - `http`: HTTP VIPs (`h1` the client side, `upstream` the backend side, h2 through hyper,
//!   headers, bodies, routes, request ids, access logs); `tcp` and `relay`: TCP VIPs;
//!   `tls`: termination, backend TLS and SNI routing; `proxy_protocol`.
//! - `backend`, `balance`, `pool`, `outlier`: backend sets, choosing one, pooled connections,
//!   passive ejection; `limits`: per-VIP and per-client limits.
//! - [`config`]: `[vip.proxy]`'s options; [`stats`]: the counters the daemon exports.
//! - `shutdown`, `quiet_sleep`, `kept_timer`, `alloc`, `trim`, `error`: stopping, timers, the allocator and
//!   memory trimming, errors.
mod accept;
mod alloc;
mod backend;
mod balance;
pub mod config;
mod error;
mod http;
mod kept_timer;
mod limits;
mod outlier;
mod pool;
mod proxy;
mod proxy_protocol;
mod quiet_sleep;
mod relay;
mod shutdown;
pub mod stats;
mod tcp;
mod tls;
mod trim;
mod vip;
mod vip_backends;
mod workers;

pub use alloc::{Allocator, MALLOC_TUNING, restart_with_malloc_tuning};
pub use config::{
    AccessLogFormat, BackendSpec, BackendTls, Balance, CertificateFiles, ForwardedHeaders, H2_WINDOW_BYTES, HashKey,
    HttpRoute, Limits, Mode, Outlier, ProxyOptions, ProxyProtocol, ProxyVipSpec, Retries, SniRoute, SniRouting,
    Timeouts, TlsTermination,
};
pub use error::ProxyError;
pub use http::log_access_as_fields;
pub use proxy::{Proxy, ProxyBuilder, ProxyHandle, serve};
pub use stats::{BackendStats, VipStats};
pub use tls::check_files as check_tls_files;
