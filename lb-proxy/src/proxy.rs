//! The entry points: start serving VIPs, and the handle the daemon keeps to steer them.
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::{BackendSpec, Balance, HashKey, Mode, ProxyVipSpec};
use crate::error::ProxyError;
use crate::shutdown::Stopper;
use crate::stats::VipStats;
use crate::vip::Vip;
use crate::workers::Workers;

/// Starts proxies. `start` binds within the caller's tokio runtime (the daemon's); serving
/// then runs on the proxy's own worker threads (one single-threaded runtime each, see
/// [`ProxyBuilder::workers`]), which stop when the last [`ProxyHandle`] clone is dropped.
/// The handle may be used from any runtime or thread.
pub struct Proxy;

impl Proxy {
    /// Binds every spec's `listen` address and serves them all, on one worker per CPU.
    pub async fn start(specs: Vec<ProxyVipSpec>) -> Result<ProxyHandle, ProxyError> {
        Proxy::builder().start(specs).await
    }

    /// Serves already bound listeners (tests bind port 0; the daemon may pass sockets it
    /// bound before dropping privileges). `spec.listen` is ignored.
    pub fn start_with_listeners(vips: Vec<(ProxyVipSpec, TcpListener)>) -> Result<ProxyHandle, ProxyError> {
        Proxy::builder().start_with_listeners(vips)
    }

    /// Options for starting a proxy.
    pub fn builder() -> ProxyBuilder {
        ProxyBuilder { workers: crate::workers::default_count() }
    }
}

/// Starts a proxy with non-default options.
#[derive(Clone, Debug)]
pub struct ProxyBuilder {
    workers: usize,
}

impl ProxyBuilder {
    /// Worker threads (default: one per CPU). Each runs a single-threaded runtime; a client
    /// connection and the backend connections serving it stay on one worker.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n.max(1);
        self
    }

    /// Like [`Proxy::start`].
    pub async fn start(self, specs: Vec<ProxyVipSpec>) -> Result<ProxyHandle, ProxyError> {
        let workers = Workers::start(self.workers).map_err(ProxyError::Workers)?;
        let handle = ProxyHandle { inner: Arc::new(Inner { vips: Mutex::new(HashMap::new()), workers }) };
        for spec in specs {
            handle.add_vip(spec).await?;
        }
        Ok(handle)
    }

    /// Like [`Proxy::start_with_listeners`].
    pub fn start_with_listeners(self, vips: Vec<(ProxyVipSpec, TcpListener)>) -> Result<ProxyHandle, ProxyError> {
        let workers = Workers::start(self.workers).map_err(ProxyError::Workers)?;
        let handle = ProxyHandle { inner: Arc::new(Inner { vips: Mutex::new(HashMap::new()), workers }) };
        for (spec, listener) in vips {
            handle.add_vip_with_listener(spec, listener)?;
        }
        Ok(handle)
    }
}

/// Serves one VIP on `listener` until `shutdown` resolves, then drains for up to `grace`.
pub async fn serve(
    listener: TcpListener,
    spec: ProxyVipSpec,
    shutdown: impl std::future::Future<Output = ()>,
    grace: Duration,
) -> Result<(), ProxyError> {
    let handle = Proxy::start_with_listeners(vec![(spec, listener)])?;
    shutdown.await;
    handle.shutdown(grace).await;
    Ok(())
}

/// `count` listeners on the VIP's address, one per worker (SO_REUSEPORT; port 0 is resolved by
/// the first). An address another program holds fails as a plain bind would.
fn bind(spec: &ProxyVipSpec, count: usize) -> Result<Vec<std::net::TcpListener>, ProxyError> {
    let err = |source| ProxyError::Bind { vip: spec.name.clone(), addr: spec.listen, source };
    let mut addr = spec.listen;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count.max(1) {
        let socket =
            socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None).map_err(err)?;
        socket.set_reuse_address(true).map_err(err)?;
        socket.set_reuse_port(true).map_err(err)?;
        socket.set_nonblocking(true).map_err(err)?;
        socket.bind(&addr.into()).map_err(err)?;
        socket.listen(1024).map_err(err)?;
        let listener: std::net::TcpListener = socket.into();
        addr = listener.local_addr().map_err(err)?;
        out.push(listener);
    }
    Ok(out)
}

/// Controls running VIPs. Cheap to clone; every method may be called from any task.
#[derive(Clone, Debug)]
pub struct ProxyHandle {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Only the control path (API, health checker, stats) takes this lock; requests use their
    /// VIP's `Arc` and the lock-free backend set.
    vips: Mutex<HashMap<String, Running>>,
    /// Declared last: dropped after the VIPs.
    workers: Workers,
}

#[derive(Debug)]
struct Running {
    vip: Arc<Vip>,
    stopper: Arc<Stopper>,
}

impl ProxyHandle {
    /// Binds `spec.listen` (a listener per worker) and starts serving a new VIP (config reload).
    pub async fn add_vip(&self, spec: ProxyVipSpec) -> Result<SocketAddr, ProxyError> {
        validate(&spec)?;
        let listeners = bind(&spec, self.inner.workers.set.count())?;
        self.serve_vip(spec, listeners)
    }

    /// Starts serving a new VIP on an already bound listener; returns its address.
    pub fn add_vip_with_listener(&self, spec: ProxyVipSpec, listener: TcpListener) -> Result<SocketAddr, ProxyError> {
        let listener = listener.into_std().map_err(|source| ProxyError::Bind {
            vip: spec.name.clone(),
            addr: spec.listen,
            source,
        })?;
        self.serve_vip(spec, vec![listener])
    }

    /// Serves a VIP on `listeners`: one per worker (each accepts for itself), or one whose
    /// acceptor hands connections to the workers in turn.
    fn serve_vip(&self, spec: ProxyVipSpec, listeners: Vec<std::net::TcpListener>) -> Result<SocketAddr, ProxyError> {
        validate(&spec)?;
        for l in &listeners {
            crate::pool::set_client_options(l, spec.options.timeouts.tcp_keepalive);
        }
        let local = listeners[0].local_addr().map_err(|source| ProxyError::Bind {
            vip: spec.name.clone(),
            addr: spec.listen,
            source,
        })?;
        let mut vips = self.lock();
        if vips.contains_key(&spec.name) {
            return Err(ProxyError::DuplicateVip(spec.name));
        }
        let name = spec.name.clone();
        let mode = spec.mode;
        let set = self.inner.workers.set.clone();
        let vip_name = spec.name.clone();
        let vip =
            Vip::new(spec, local, set.count()).map_err(|reason| ProxyError::InvalidSpec { vip: vip_name, reason })?;
        let vip = Arc::new(vip);
        let (stopper, tasks) = Stopper::new();
        let spread = listeners.len() < set.count();
        for (i, std_listener) in listeners.into_iter().enumerate() {
            let (served, accept_tasks, acceptor_set) = (vip.clone(), tasks.clone(), set.clone());
            let worker = if spread { set.next() } else { i };
            set.spawn_on(worker, &tasks.tracker, async move {
                // Registered with the reactor of the worker that accepts on it.
                match TcpListener::from_std(std_listener) {
                    Ok(l) => crate::accept::serve(l, served, accept_tasks, acceptor_set, spread).await,
                    Err(e) => tracing::error!(error = %e, "proxy VIP cannot listen"),
                }
            });
        }
        let mode = match mode {
            Mode::Http => "http",
            Mode::Tcp => "tcp",
        };
        tracing::info!(vip = %name, addr = %local, mode, "proxy VIP serving");
        vips.insert(name, Running { vip, stopper: Arc::new(stopper) });
        Ok(local)
    }

    /// Stops a VIP: no new connections, in-flight requests get up to `grace`.
    pub async fn remove_vip(&self, name: &str, grace: Duration) -> Result<(), ProxyError> {
        let running = self.lock().remove(name).ok_or_else(|| ProxyError::UnknownVip(name.into()))?;
        running.stopper.shutdown(grace).await;
        Ok(())
    }

    /// The address a VIP listens on (with port 0 resolved).
    pub fn local_addr(&self, vip: &str) -> Option<SocketAddr> {
        self.lock().get(vip).map(|r| r.vip.local_addr)
    }

    /// Replaces a VIP's backends (atomically: each request sees the old or the new set).
    /// Weight 0 drains a backend; removed backends finish their in-flight requests.
    pub fn set_backends(&self, vip: &str, backends: Vec<BackendSpec>) -> Result<(), ProxyError> {
        self.vip(vip)?.backends.set_backends(&backends);
        Ok(())
    }

    /// The health checker's verdict on a backend: down backends get no new requests.
    /// An address may be one of the VIP's backends or of its SNI routes (or both).
    pub fn set_backend_health(&self, vip: &str, addr: SocketAddr, up: bool) -> Result<(), ProxyError> {
        if self.vip(vip)?.set_health(addr, up) {
            Ok(())
        } else {
            Err(ProxyError::UnknownBackend { vip: vip.into(), addr })
        }
    }

    /// Reads a TLS VIP's certificate and key files again: new handshakes get the new
    /// certificates, established connections keep theirs. Nothing changes when a file is
    /// wrong (the error says which). Returns false for VIPs without TLS termination.
    pub fn reload_tls(&self, vip: &str) -> Result<bool, ProxyError> {
        let v = self.vip(vip)?;
        let Some(tls) = &v.tls else {
            return Ok(false);
        };
        tls.reload().map_err(|reason| ProxyError::InvalidSpec { vip: vip.into(), reason })?;
        Ok(true)
    }

    /// Per-VIP, per-backend counters, VIPs sorted by name.
    pub fn stats(&self) -> Vec<VipStats> {
        let mut out: Vec<VipStats> = self.lock().values().map(|r| r.vip.stats()).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Graceful shutdown of every VIP: every listener stops accepting at once, then in-flight
    /// requests of all VIPs finish within one `grace`, then what is left is closed.
    pub async fn shutdown(&self, grace: Duration) {
        let stoppers: Vec<Arc<Stopper>> = self.lock().drain().map(|(_, r)| r.stopper).collect();
        for s in &stoppers {
            s.stop_accepting();
        }
        let deadline = tokio::time::Instant::now() + grace;
        // One deadline for all: waiting for them in turn takes no longer than the grace.
        for s in &stoppers {
            s.finish(deadline).await;
        }
    }

    fn vip(&self, name: &str) -> Result<Arc<Vip>, ProxyError> {
        self.lock().get(name).map(|r| r.vip.clone()).ok_or_else(|| ProxyError::UnknownVip(name.into()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.inner.vips.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn validate(spec: &ProxyVipSpec) -> Result<(), ProxyError> {
    let invalid = |reason: &str| ProxyError::InvalidSpec { vip: spec.name.clone(), reason: reason.into() };
    if spec.mode == Mode::Tcp
        && let Balance::ConsistentHash { key: HashKey::Header(_) | HashKey::Cookie(_) } = spec.options.balance
    {
        return Err(invalid("a TCP VIP can only hash on the client address"));
    }
    if spec.options.limits.max_connections == 0 {
        return Err(invalid("limits.max_connections must be at least 1"));
    }
    Ok(())
}
