//! `lb-ctl proxy --listen ... --backend ...` as a newcomer types it, mistakes included: each
//! mistake is said where the user wrote it (the flag, or the backends file's line), never at a
//! line of the lb.toml the quick start writes for itself.
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_lb-ctl");

/// `lb-ctl --socket DIR/proxy.sock proxy ARGS`: the quick start's files stay in `dir`.
fn proxy(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.arg("--socket").arg(dir.join("proxy.sock")).arg("proxy").args(args);
    c
}

fn failed(out: Output) -> (Option<i32>, String) {
    assert!(!out.status.success(), "must fail: {}", String::from_utf8_lossy(&out.stdout));
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A daemon this test started, killed by pid when the test ends.
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_bare_port_listens_on_every_ipv4_address() {
    let dir = tempfile::tempdir().unwrap();
    let backend = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port();
    let spec = backend.local_addr().unwrap().to_string();
    let child = proxy(dir.path(), &["--listen", &port.to_string(), "--backend", &spec, "--log-level", "warn"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut started = Started(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = started.0.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(started.0.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("`--listen {port}` was refused ({status}): {err}");
        }
        assert!(Instant::now() < deadline, "nothing listens on port {port} after 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let vips = Command::new(BIN).arg("--socket").arg(dir.path().join("proxy.sock")).args(["vips", "list"]).output();
    let vips = String::from_utf8_lossy(&vips.unwrap().stdout).into_owned();
    assert!(vips.contains(&format!("0.0.0.0:{port}")), "{vips}");
}

#[test]
fn backend_mistakes_are_blamed_on_the_flag_that_gave_them() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--listen",
        "127.0.0.1:7777",
        "--backend",
        "127.0.0.1:99999",
        "--backend",
        "no-such-host.invalid:80",
        "--backend",
        "127.0.0.1:0",
        "--backend",
        "127.0.0.1:8080",
    ];
    let (code, err) = failed(proxy(dir.path(), &args).output().unwrap());
    assert_eq!(code, Some(1), "{err}");
    for said in [
        "--backend 127.0.0.1:99999: port 99999 is out of range (1-65535)",
        "--backend no-such-host.invalid:80: backend host \"no-such-host.invalid\" does not resolve",
        "--backend 127.0.0.1:0: port 0 is not a port to connect to",
    ] {
        assert!(err.contains(said), "{said:?} not in:\n{err}");
    }
    assert!(!err.contains("proxy-quick.toml"), "blamed on a file the user never wrote:\n{err}");
}

#[test]
fn every_bad_line_of_a_backends_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("backends.txt");
    std::fs::write(&file, "127.0.0.1:8080\n127.0.0.1:99999\n# a comment\nnot-a-backend\n127.0.0.1:8081\n").unwrap();
    let args = ["--listen", "127.0.0.1:7777", "--backends-file", file.to_str().unwrap()];
    let (code, err) = failed(proxy(dir.path(), &args).output().unwrap());
    assert_eq!(code, Some(1), "{err}");
    let f = file.display();
    assert!(err.contains(&format!("{f}:2: \"127.0.0.1:99999\": port 99999 is out of range")), "{err}");
    assert!(err.contains(&format!("{f}:4: \"not-a-backend\": not HOST:PORT")), "{err}");
}

#[test]
fn backends_without_a_listener_ask_only_for_the_listener() {
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = failed(proxy(dir.path(), &["--backend", "127.0.0.1:8080"]).output().unwrap());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--listen"), "{err}");
    assert!(!err.contains("--config"), "--config is not what is missing:\n{err}");
}
