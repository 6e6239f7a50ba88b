//! The etcd side: connect with `[fleet]`'s settings, read the fleet's state at one revision,
//! write a new state in one transaction guarded by the revision it was read at.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, PutOptions, TlsOptions, Txn, TxnOp,
};

use super::state::{GENERATION, NODES, STATE, Snapshot};
use crate::config::fleet::FleetSettings;

/// How long one request to etcd may take before it counts as a lost etcd.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// What went wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// etcd could not be reached or refused the request.
    #[error("etcd ({endpoints}): {source}")]
    Etcd {
        endpoints: String,
        #[source]
        source: etcd_client::Error,
    },
    /// A TLS file could not be read.
    #[error("{0}")]
    Tls(String),
    /// Someone else wrote the fleet between our read and our write: nothing was written.
    #[error(
        "the fleet changed since it was read (another write at revision {0}); nothing was written: look again and retry"
    )]
    Conflict(i64),
    /// A value could not be used.
    #[error("{0}")]
    Value(String),
}

/// The index (in `[fleet] endpoints`) of the member that served last: tried first.
static PREFERRED: AtomicUsize = AtomicUsize::new(0);

type Shared = std::sync::Mutex<Vec<(FleetSettings, Store)>>;

fn shared_slot() -> &'static Shared {
    static SHARED: std::sync::OnceLock<Shared> = std::sync::OnceLock::new();
    SHARED.get_or_init(Default::default)
}

fn connect_options(settings: &FleetSettings) -> Result<ConnectOptions, StoreError> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(REQUEST_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT)
        .with_keep_alive(Duration::from_secs(1), REQUEST_TIMEOUT)
        // A member cut off from the quorum must not answer with stale state.
        .with_require_leader(true);
    if settings.ca_file.is_some() || settings.cert_file.is_some() {
        let read =
            |p: &std::path::Path| std::fs::read(p).map_err(|e| StoreError::Tls(format!("fleet: {}: {e}", p.display())));
        let mut tls = TlsOptions::new();
        if let Some(ca) = &settings.ca_file {
            tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
        }
        if let (Some(cert), Some(key)) = (&settings.cert_file, &settings.key_file) {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        options = options.with_tls(tls);
    }
    Ok(options)
}

/// A client of the member at `endpoint`, once it answered a request: the connection is made
/// lazily, and with `require_leader` a member without a leader refuses.
async fn pin(endpoint: &str, prefix: &str, options: ConnectOptions) -> Result<Client, etcd_client::Error> {
    let mut client = Client::connect([endpoint], Some(options)).await?;
    client.get(format!("{prefix}/{GENERATION}"), Some(GetOptions::new().with_count_only())).await?;
    Ok(client)
}

/// A connection to the fleet's keys (one member of the etcd cluster).
#[derive(Clone)]
pub struct Store {
    client: Client,
    prefix: String,
    /// The member it talks to (named in errors).
    endpoints: String,
}

impl Store {
    /// Connects to one member of `settings.endpoints` that serves: the one that served last
    /// first, then the others in turn. One member at a time, as etcd's own clients do: a
    /// client balancing requests over every endpoint fails those it sends to a dead member
    /// (`tcp connect error` with one member of three down), where the cluster serves.
    pub async fn connect(settings: &FleetSettings) -> Result<Store, StoreError> {
        let options = connect_options(settings)?;
        let count = settings.endpoints.len();
        let first = PREFERRED.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..count {
            let k = (first + i) % count;
            let endpoint = &settings.endpoints[k];
            match pin(endpoint, &settings.prefix, options.clone()).await {
                Ok(client) => {
                    PREFERRED.store(k, Ordering::Relaxed);
                    return Ok(Store { client, prefix: settings.prefix.clone(), endpoints: endpoint.clone() });
                }
                Err(e) => {
                    tracing::debug!(endpoint = %endpoint, error = %e, "fleet: etcd member does not serve; trying the next");
                    last = Some(e);
                }
            }
        }
        let source = last.unwrap_or_else(|| etcd_client::Error::InvalidArgs("no endpoints".into()));
        Err(StoreError::Etcd { endpoints: settings.endpoints.join(","), source })
    }

    /// The process's connection to the fleet of `settings`, shared by the node's follower
    /// and its backend changes (one client per daemon, not one per request); connected on
    /// first use and again after [`Store::forget`].
    pub async fn shared(settings: &FleetSettings) -> Result<Store, StoreError> {
        if let Some(store) = shared_slot().lock().unwrap().iter().find(|(s, _)| s == settings).map(|(_, st)| st.clone())
        {
            return Ok(store);
        }
        let store = Store::connect(settings).await?;
        let mut slot = shared_slot().lock().unwrap();
        slot.retain(|(s, _)| s != settings);
        slot.push((settings.clone(), store.clone()));
        Ok(store)
    }

    /// Drops the shared connection after it failed: the next [`Store::shared`] connects
    /// again (to another member if this one is gone).
    pub fn forget(settings: &FleetSettings) {
        shared_slot().lock().unwrap().retain(|(s, _)| s != settings);
    }

    fn etcd(&self, source: etcd_client::Error) -> StoreError {
        StoreError::Etcd { endpoints: self.endpoints.clone(), source }
    }

    /// The absolute key of `relative`.
    pub fn key(&self, relative: &str) -> String {
        format!("{}/{relative}", self.prefix)
    }

    /// The key relative to the prefix, if it is under it.
    pub fn relative<'a>(&self, key: &'a str) -> Option<&'a str> {
        key.strip_prefix(self.prefix.as_str())?.strip_prefix('/')
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Every value under `state/`, at one revision.
    pub async fn read(&mut self) -> Result<Snapshot, StoreError> {
        let got =
            self.client.get(self.key(STATE), Some(GetOptions::new().with_prefix())).await.map_err(|e| self.etcd(e))?;
        let revision = got.header().map_or(0, |h| h.revision());
        let mut snapshot = Snapshot { revision, generation: 0, values: BTreeMap::new() };
        for kv in got.kvs() {
            let Some(key) = kv.key_str().ok().and_then(|k| self.relative(k)) else { continue };
            if key == GENERATION {
                snapshot.generation = kv.mod_revision();
                continue;
            }
            // A value that is not UTF-8 is kept as a marker so decoding refuses it by key.
            let value = String::from_utf8(kv.value().to_vec()).unwrap_or_else(|_| "\u{0}not UTF-8".into());
            snapshot.values.insert(key.to_string(), value);
        }
        Ok(snapshot)
    }

    /// Makes `next` the fleet's state (every key under `state/`), if nobody wrote since `seen`
    /// was read. Returns the revision of the write. Keys whose value is unchanged are not
    /// rewritten; `why` is recorded in the generation key.
    pub async fn write(
        &mut self,
        seen: &Snapshot,
        next: &BTreeMap<String, String>,
        why: &str,
    ) -> Result<i64, StoreError> {
        let mut ops = Vec::new();
        for (key, value) in next {
            if seen.values.get(key) != Some(value) {
                ops.push(TxnOp::put(self.key(key), value.as_bytes(), None));
            }
        }
        for key in seen.values.keys().filter(|k| !next.contains_key(*k)) {
            ops.push(TxnOp::delete(self.key(key), None));
        }
        ops.push(TxnOp::put(self.key(GENERATION), why.as_bytes(), None));
        let guard = Compare::mod_revision(self.key(GENERATION), CompareOp::Equal, seen.generation);
        let txn = Txn::new().when([guard]).and_then(ops).or_else([TxnOp::get(self.key(GENERATION), None)]);
        let answer = self.client.txn(txn).await.map_err(|e| self.etcd(e))?;
        if !answer.succeeded() {
            let now = answer
                .op_responses()
                .into_iter()
                .find_map(|r| match r {
                    etcd_client::TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.mod_revision()),
                    _ => None,
                })
                .unwrap_or(0);
            return Err(StoreError::Conflict(now));
        }
        Ok(answer.header().map_or(0, |h| h.revision()))
    }

    /// Every node record: name → JSON text.
    pub async fn nodes(&mut self) -> Result<BTreeMap<String, String>, StoreError> {
        let got =
            self.client.get(self.key(NODES), Some(GetOptions::new().with_prefix())).await.map_err(|e| self.etcd(e))?;
        let mut out = BTreeMap::new();
        for kv in got.kvs() {
            let Some(name) = kv.key_str().ok().and_then(|k| self.relative(k)).and_then(|k| k.strip_prefix(NODES))
            else {
                continue;
            };
            out.insert(name.to_string(), String::from_utf8_lossy(kv.value()).into_owned());
        }
        Ok(out)
    }

    /// Writes node `name`'s record under `lease`.
    pub async fn put_node(&mut self, name: &str, record: &str, lease: i64) -> Result<(), StoreError> {
        let key = self.key(&format!("{NODES}{name}"));
        self.client.put(key, record, Some(PutOptions::new().with_lease(lease))).await.map_err(|e| self.etcd(e))?;
        Ok(())
    }
}
