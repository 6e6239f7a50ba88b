//! A daemon for tests: [`crate::daemon::serve`] over a shared in-memory data plane, on a
//! temp-dir socket, driven through the real API client.
use std::path::{Path, PathBuf};

use tokio::sync::oneshot;

use crate::api::client::{Client, ClientError};
use crate::api::server::bind_unix;
use crate::api::types::{BackendRequest, BackendView};
use crate::config::Config;
use crate::daemon::{self, Options};
use crate::dataplane::Dataplane;
use crate::testing::SharedFake;

pub const RING: u32 = 251;

pub fn lb_toml(extra: &str) -> String {
    format!(
        r#"
[daemon]
ring_size = {RING}
hash_seed = 7

[[vip]]
name = "web"
address = "203.0.113.10"
port = 80
backends = [ {{ address = "198.51.100.1", port = 8080 }}, {{ address = "198.51.100.2", port = 8080, weight = 50 }} ]

[[vip]]
name = "dns"
address = "203.0.113.11"
port = 53
protocol = "udp"
hash = "flow"
backends = [ {{ address = "198.51.100.3" }} ]
{extra}"#
    )
}

pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub client: Client,
    pub fake: SharedFake,
    /// The metrics port (`[daemon] metrics`), on 127.0.0.1 port 0.
    pub metrics: std::net::SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Box<dyn Dataplane>>>,
}

impl Daemon {
    pub async fn start(text: &str) -> Daemon {
        Daemon::start_on(tempfile::tempdir().unwrap(), SharedFake::default(), text).await
    }

    /// A daemon on `dir` (its saved state) and `fake` (maps that outlive a daemon, as pinned
    /// maps do).
    pub async fn start_on(dir: tempfile::TempDir, fake: SharedFake, text: &str) -> Daemon {
        Daemon::start_with(dir, fake, text, true).await
    }

    /// As [`Daemon::start_on`]; `maps_reused` says whether the maps hold a previous run's
    /// contents.
    pub async fn start_with(dir: tempfile::TempDir, fake: SharedFake, text: &str, maps_reused: bool) -> Daemon {
        let config_path = dir.path().join("lb.toml");
        std::fs::write(&config_path, text).unwrap();
        let config = Config::load(&config_path).unwrap_or_else(|e| panic!("{e}"));
        let socket = socket_path(dir.path());
        let listener = bind_unix(&socket).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let options = Options {
            interface: "test0".into(),
            xdp_mode: None,
            ids_file: Some(dir.path().join("ids.json")),
            kernel_routes: false,
            maps_reused,
            pin_dir: None,
            fleet: None,
            started: None,
        };
        let dp: Box<dyn Dataplane> = Box::new(fake.clone());
        let metrics_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let metrics = metrics_listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut listeners = daemon::Listeners::unix(listener);
            listeners.metrics = Some(metrics_listener);
            daemon::serve(config, listeners, dp, options, async {
                let _ = stopped.await;
            })
            .await
            .unwrap()
        });
        let d = Daemon { client: Client::new(socket), dir, fake, metrics, stop: Some(stop), task: Some(task) };
        // Answers once the initial maps are written.
        d.client.status().await.unwrap();
        d
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("lb.toml")
    }

    pub async fn stop(mut self) -> tempfile::TempDir {
        self.stop.take().unwrap().send(()).unwrap();
        self.task.take().unwrap().await.unwrap();
        self.dir
    }

    /// `GET path` on the metrics port; the whole answer, head and body.
    pub async fn metrics_get(&self, path: &str) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut s = tokio::net::TcpStream::connect(self.metrics).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    pub async fn list(&self) -> Vec<BackendView> {
        self.client.backends(None).await.unwrap()
    }

    pub fn req(&self, vip: &str, address: &str, weight: Option<u64>) -> BackendRequest {
        BackendRequest { vip: vip.into(), address: address.into(), weight }
    }
}

pub fn socket_path(dir: &Path) -> PathBuf {
    dir.join("run").join("lb-ctl").join("test0.sock")
}

pub fn refused(r: Result<impl std::fmt::Debug, ClientError>) -> (u16, String) {
    match r {
        Err(ClientError::Refused { status, message }) => (status, message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
