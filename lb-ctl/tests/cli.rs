//! The `lb-ctl` binary end to end, without root: `attach --fake-dataplane` keeps the maps in
//! memory, everything else is the real daemon, socket and CLI.
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_lb-ctl");

fn config(socket: &Path, extra: &str) -> String {
    format!(
        r#"[daemon]
api_socket = "{}"
ring_size = 251

[[vip]]
name = "web"
address = "203.0.113.10"
port = 80
backends = [ {{ address = "198.51.100.1", port = 8080 }}, {{ address = "198.51.100.2", port = 8080 }} ]
{extra}"#,
        socket.display()
    )
}

/// A daemon process; killed (by pid) if the test fails before stopping it.
struct Daemon {
    child: Option<Child>,
    dir: tempfile::TempDir,
    socket: PathBuf,
}

impl Daemon {
    fn start() -> Daemon {
        Daemon::start_with("lb.toml", |socket| config(socket, ""))
    }

    /// A daemon whose configuration file is `name` (in its directory), written by `text` from
    /// the control socket's path.
    fn start_with(name: &str, text: impl Fn(&Path) -> String) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("run").join("test0.sock");
        std::fs::write(dir.path().join(name), text(&socket)).unwrap();
        let child = Command::new(BIN)
            .args(["attach", "test0", "--fake-dataplane", "--log-level", "warn", "--config"])
            .arg(dir.path().join(name))
            .arg("--state-dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let d = Daemon { child: Some(child), dir, socket };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !d.run(&["status"]).status.success() {
            assert!(Instant::now() < deadline, "the daemon did not answer within 10 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        d
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--socket").arg(&self.socket).args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs a command that must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs a command that must fail; its exit code and stderr.
    fn fails(&self, args: &[&str]) -> (i32, String) {
        let out = self.run(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        (out.status.code().unwrap(), String::from_utf8(out.stderr).unwrap())
    }

    fn signal(&self, sig: i32) {
        let pid = self.child.as_ref().unwrap().id() as i32;
        // SAFETY: kill(2) on the pid of a child this test started.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn commands_and_exit_codes() {
    let d = Daemon::start();
    let list = d.ok(&["backends", "list"]);
    assert!(
        list.starts_with("VIP  BACKEND            WEIGHT  HEALTH     STATE   PACKETS  BYTES  FLOWS  IN RING\n"),
        "{list}"
    );
    assert!(list.contains("web  198.51.100.2:8080     100  unchecked  active        0      0      0  yes"), "{list}");

    assert_eq!(
        d.ok(&["backends", "add", "web", "198.51.100.3:8080", "--weight", "5"]),
        "web: backend 198.51.100.3:8080 added\n"
    );
    assert_eq!(
        d.fails(&["backends", "add", "web", "198.51.100.3:8080"]),
        (1, "lb-ctl: VIP \"web\" already has backend 198.51.100.3:8080\n".into())
    );
    assert_eq!(
        d.fails(&["backends", "add", "nope", "198.51.100.3:8080"]),
        (1, "lb-ctl: unknown VIP \"nope\"\n".into())
    );
    assert_eq!(
        d.fails(&["backends", "add", "web", "198.51.100.4:8080", "--weight", "70000"]),
        (1, "lb-ctl: VIP \"web\": weight 70000 is out of range (0-65535)\n".into())
    );
    assert_eq!(d.fails(&["backends", "add", "web", "not-an-address"]).0, 1);
    // A malformed command line is clap's: exit 2.
    assert_eq!(d.fails(&["backends", "add", "web"]).0, 2);
    let (code, err) = d.fails(&["decap", "attach", "eth9", "--from", "198.51.100.0/33"]);
    assert_eq!(code, 2);
    assert!(err.contains("\"198.51.100.0/33\" is not an IP address or prefix"), "{err}");
    let (code, err) = d.fails(&["decap", "attach", "eth9"]);
    assert!(code == 2 && err.contains("--from <PREFIX>"), "the decapsulator needs its allowed sources: {err}");

    assert_eq!(
        d.ok(&["backends", "drain", "203.0.113.10:80", "198.51.100.1:8080"]),
        "web: backend 198.51.100.1:8080 draining: no new flows, established ones stay\n"
    );
    assert_eq!(d.ok(&["backends", "remove", "web", "198.51.100.3:8080"]), "web: backend 198.51.100.3:8080 removed\n");
    let json: serde_json::Value = serde_json::from_str(&d.ok(&["backends", "list", "web", "--json"])).unwrap();
    let states: Vec<&str> = json.as_array().unwrap().iter().map(|b| b["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["draining", "active"]);

    assert!(d.ok(&["vips", "list"]).contains("web   203.0.113.10:80/tcp  nat"));
    assert!(d.ok(&["status"]).starts_with("lb-ctl "));
    assert!(d.ok(&["stats"]).contains("flow_new"));
    let explain = d.ok(&["explain", "web", "192.0.2.7"]);
    assert!(explain.starts_with("192.0.2.7 -> web: 198.51.100.2:8080\nby the Maglev ring: ring slot"), "{explain}");

    // Reload with a mistake: exit 1, file:line, nothing changes.
    let before = d.ok(&["backends", "list", "--json"]);
    let path = d.dir.path().join("lb.toml");
    std::fs::write(&path, config(&d.socket, "[[vip]]\naddress = \"203.0.113.11\"\nport = 0\n")).unwrap();
    let (code, err) = d.fails(&["reload"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!(
            "lb-ctl: reload refused, nothing changed:\n{}:12: vip \"203.0.113.11:0/tcp\": port must be 1-65535, got 0\n",
            path.display()
        )
    );
    assert_eq!(d.ok(&["backends", "list", "--json"]), before);
    // validate says the same without a daemon.
    let out = Command::new(BIN).arg("validate").arg("--config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("{}:12: vip \"203.0.113.11:0/tcp\": port must be 1-65535, got 0\n", path.display())
    );

    // SIGHUP reloads a good file (the reload replaces runtime changes: drain is gone).
    std::fs::write(
        &path,
        config(&d.socket, "").replace(
            "{ address = \"198.51.100.2\", port = 8080 }",
            "{ address = \"198.51.100.2\", port = 8080 }, { address = \"198.51.100.9\" }",
        ),
    )
    .unwrap();
    d.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !d.ok(&["backends", "list"]).contains("198.51.100.9:80") {
        assert!(Instant::now() < deadline, "SIGHUP did not reload");
        std::thread::sleep(Duration::from_millis(50));
    }

    // SIGTERM: a clean stop, exit 0, socket removed.
    d.signal(libc::SIGTERM);
    let mut d = d;
    let status = d.child.take().unwrap().wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!d.socket.exists());
    assert_eq!(d.fails(&["status"]).0, 3, "no daemon: exit 3");
}

/// Scale-out: balancers given the same backends build the same ring, whatever order the file
/// lists them in, whatever ids their history gave them, and across restarts.
#[test]
fn every_node_given_the_same_backends_builds_the_same_ring() {
    let file = |order: &[u8]| {
        let backends: Vec<String> =
            order.iter().map(|i| format!("{{ address = \"198.51.100.{i}\", port = 8080 }}")).collect();
        move |socket: &Path| {
            format!(
                "[daemon]\napi_socket = \"{}\"\nring_size = 65537\n\n[[vip]]\nname = \"web\"\naddress = \"203.0.113.10\"\nport = 80\nforwarding = \"dsr-ipip\"\nencap_source = \"198.51.100.254\"\nbackends = [ {} ]\n",
                socket.display(),
                backends.join(", ")
            )
        }
    };
    let digest = |d: &Daemon| -> String {
        let vips: serde_json::Value = serde_json::from_str(&d.ok(&["vips", "list", "--json"])).unwrap();
        vips[0]["ring_digest"].as_str().expect("an XDP VIP has a ring digest").to_string()
    };
    let a = Daemon::start_with("lb.toml", file(&[1, 2, 3]));
    let b = Daemon::start_with("lb.toml", file(&[3, 1, 2]));
    // b's history differs: a backend added and removed first shifts the ids it hands out.
    b.ok(&["backends", "add", "web", "198.51.100.9:8080"]);
    b.ok(&["backends", "remove", "web", "198.51.100.9:8080"]);
    b.ok(&["reload"]);
    let ids = |d: &Daemon| d.ok(&["backends", "list", "--json"]);
    assert_eq!(digest(&a), digest(&b), "same backends, same ring:\n{}\n{}", ids(&a), ids(&b));
    let first = digest(&a);
    drop(a);
    let restarted = Daemon::start_with("lb.toml", file(&[2, 3, 1]));
    assert_eq!(digest(&restarted), first, "a restarted node builds the ring it had");
    b.ok(&["backends", "drain", "web", "198.51.100.2:8080"]);
    assert_ne!(digest(&b), first, "a drained backend changes the ring");
    let list = b.ok(&["vips", "list"]);
    assert!(list.contains("RING") && list.contains(&digest(&b)[..8]), "{list}");
}

/// Route health injection: a VIP is announced while enough of its backends serve and the node
/// is not drained (kept in memory here; the root suite checks the kernel table and BIRD).
#[test]
fn a_vip_is_announced_while_it_can_be_served_and_node_drain_withdraws_it() {
    let d = Daemon::start_with("lb.toml", |socket| {
        format!(
            "[daemon]\napi_socket = \"{}\"\nring_size = 251\n\n[[vip]]\nname = \"web\"\naddress = \"203.0.113.10\"\nport = 80\nforwarding = \"dsr-ipip\"\nencap_source = \"198.51.100.254\"\nannounce = {{ min_healthy = 2 }}\nbackends = [ {{ address = \"198.51.100.1\" }}, {{ address = \"198.51.100.2\" }} ]\n",
            socket.display()
        )
    });
    let announced = |d: &Daemon| -> Vec<String> {
        let s: serde_json::Value = serde_json::from_str(&d.ok(&["status", "--json"])).unwrap();
        s["announced"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect()
    };
    assert_eq!(announced(&d), ["203.0.113.10"]);
    let status = d.ok(&["status"]);
    assert!(status.contains("announced   203.0.113.10 (routes in table 4242; "), "{status}");
    d.ok(&["backends", "drain", "web", "198.51.100.2"]);
    assert!(announced(&d).is_empty(), "one backend left of the two required");
    d.ok(&["backends", "undrain", "web", "198.51.100.2"]);
    assert_eq!(announced(&d), ["203.0.113.10"]);

    let out = d.ok(&["node", "drain"]);
    assert!(out.contains("node drained"), "{out}");
    assert!(announced(&d).is_empty());
    assert!(d.ok(&["status"]).contains("node        DRAINED"));
    d.ok(&["reload"]);
    assert!(announced(&d).is_empty(), "a reload keeps the node drained");
    assert!(d.ok(&["node", "undrain"]).contains("1 VIP address(es) announced"));
    assert_eq!(announced(&d), ["203.0.113.10"]);
}

/// lb.yaml: the daemon runs from it, and reload and validate name the YAML file's lines.
#[test]
fn a_yaml_configuration_runs_reloads_and_validates() {
    let yaml = |socket: &Path, backends: &str| {
        format!(
            "daemon:\n  api_socket: {}\n  ring_size: 251\nvip:\n  - name: web\n    address: 203.0.113.10\n    port: 80\n    backends:\n{backends}",
            socket.display()
        )
    };
    let two = "      - { address: 198.51.100.1, port: 8080 }\n      - address: 198.51.100.2\n        port: 8080\n";
    let d = Daemon::start_with("lb.yaml", |socket| yaml(socket, two));
    let list = d.ok(&["backends", "list"]);
    assert!(list.contains("198.51.100.1:8080") && list.contains("198.51.100.2:8080"), "{list}");

    let path = d.dir.path().join("lb.yaml");
    let broken = "      - address: 198.51.100.1\n        port: 8080\n        wieght: 5\n";
    std::fs::write(&path, yaml(&d.socket, broken)).unwrap();
    let (code, err) = d.fails(&["reload"]);
    assert_eq!(code, 1);
    assert!(err.contains(&format!("{}:11: unknown field `wieght`", path.display())), "{err}");
    assert_eq!(d.ok(&["backends", "list"]), list, "a refused reload changes nothing");
    let out = Command::new(BIN).arg("validate").arg("--config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with(&format!("{}:11: unknown field `wieght`", path.display()))
    );

    let three = format!("{two}      - {{ address: 198.51.100.3, port: 8080 }}\n");
    std::fs::write(&path, yaml(&d.socket, &three)).unwrap();
    d.ok(&["reload"]);
    assert!(d.ok(&["backends", "list"]).contains("198.51.100.3:8080"));
}

#[test]
fn attach_refuses_a_bad_config_before_touching_anything() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("test0.sock");
    let path = dir.path().join("lb.toml");
    std::fs::write(&path, config(&socket, "[[vip]]\nadress = \"203.0.113.11\"\nport = 80\n")).unwrap();
    let out = Command::new(BIN).args(["attach", "test0", "--fake-dataplane", "--config"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:11: unknown field `adress`", path.display())), "{err}");
    assert!(!socket.exists(), "nothing was started");
}

/// Only root may use the control socket: the file is 0600, and the daemon also checks the
/// peer's credentials. Needs root to switch to another user: prints SKIPPED without it, and
/// fails instead under CI (`CI` set), where it must run.
#[test]
fn non_root_users_are_refused() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !runs_as_root("non_root_users_are_refused", root, std::env::var_os("CI").is_some()) {
        return;
    }
    let d = Daemon::start();
    let nobody = 65534;
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Open the way to the socket file: the file mode alone refuses.
    for dir in [d.dir.path(), d.socket.parent().unwrap()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = d.command(&["status"]).uid(nobody).gid(nobody).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
    // Even with the file opened to everyone, the daemon hangs up on a non-root peer.
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = d.command(&["status"]).uid(nobody).gid(nobody).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty());
    // Root still gets in.
    d.ok(&["status"]);
}

/// Whether a test that needs root runs: without root it prints SKIPPED, or under CI fails.
fn runs_as_root(test: &str, root: bool, ci: bool) -> bool {
    if root {
        return true;
    }
    assert!(!ci, "{test}: needs root (to run a client as another user) and CI is set: refusing to skip");
    eprintln!("SKIPPED (needs root): {test}");
    false
}

#[test]
#[should_panic(expected = "and CI is set: refusing to skip")]
fn a_root_test_without_root_fails_under_ci() {
    runs_as_root("t", false, true);
}

#[test]
fn a_root_test_without_root_skips_outside_ci() {
    assert!(!runs_as_root("t", false, false));
    assert!(runs_as_root("t", true, true));
}

/// The subcommands a user sees, for the completion and man page checks.
const SUBCOMMANDS: &[&str] = &[
    "attach",
    "validate",
    "reload",
    "detach",
    "backends",
    "vips",
    "status",
    "stats",
    "explain",
    "decap",
    "proxy",
    "completions",
    "man",
];

#[test]
fn completions_for_every_shell_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(BIN).args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(!script.is_empty(), "{shell}: empty script");
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell} completions do not mention {sub}");
        }
        assert!(script.contains("enable-forwarding"), "{shell}: attach's options are offered");
        assert!(!script.contains("fake-dataplane"), "{shell} completions offer a hidden test-only option");
    }
    let out = Command::new(BIN).args(["completions", "tcsh-ish"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "an unknown shell is a usage error");
}

#[test]
fn man_pages_are_written_for_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN).arg("man").arg(dir.path().join("man1")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut pages = vec!["lb-ctl".to_string()];
    pages.extend(SUBCOMMANDS.iter().map(|s| format!("lb-ctl-{s}")));
    pages.extend(
        [
            "backends-add",
            "backends-remove",
            "backends-drain",
            "backends-list",
            "vips-list",
            "decap-attach",
            "decap-detach",
        ]
        .map(|s| format!("lb-ctl-{s}")),
    );
    for page in pages {
        let path = dir.path().join("man1").join(format!("{page}.1"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}.1 is not a man page");
    }
}

/// `--socket` and `--iface` are documented on the commands that talk to a running daemon and
/// on no other (`proxy` and `detach` take `--socket` alone); `man` is a documented subcommand.
#[test]
fn man_pages_offer_socket_and_iface_only_where_they_apply() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN).arg("man").arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let options = |name: &str| {
        let page = std::fs::read_to_string(dir.path().join(format!("lb-ctl-{name}.1"))).unwrap();
        (page.contains("\\-\\-socket"), page.contains("\\-\\-iface"))
    };
    let mut wrong = Vec::new();
    for (names, want) in [
        (
            &["status", "stats", "reload", "top", "explain", "backends-list", "backends-add", "vips-list"][..],
            (true, true),
        ),
        (&["proxy", "detach"][..], (true, false)),
        (&["attach", "validate", "export", "completions", "man", "backend-setup", "decap-attach"][..], (false, false)),
    ] {
        for name in names {
            if options(name) != want {
                wrong.push(format!("lb-ctl-{name}.1: (--socket, --iface) shown {:?}, want {want:?}", options(name)));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let help = |args: &[&str]| String::from_utf8(Command::new(BIN).args(args).output().unwrap().stdout).unwrap();
    assert!(help(&["--help"]).contains("\n  man "), "lb-ctl --help does not list man:\n{}", help(&["--help"]));
    assert!(!help(&["attach", "--help"]).contains("--socket"), "{}", help(&["attach", "--help"]));
}

#[test]
fn a_bad_log_level_is_refused_before_anything_starts() {
    let out = Command::new(BIN)
        .args(["proxy", "--config", "/nonexistent.toml", "--log-level", "lb_ctl=loud"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--log-level") && err.contains("lb_ctl=debug"), "{err}");
}

/// `stats --watch` streams one block of rates per interval and stops after `--count`.
#[test]
fn stats_watch_prints_count_samples_of_rates() {
    let d = Daemon::start();
    let started = Instant::now();
    let out = d.ok(&["stats", "--watch", "--interval", "0.2", "--count", "3"]);
    assert!(started.elapsed() < Duration::from_secs(10), "--count 3 at 0.2 s took {:?}", started.elapsed());
    assert_eq!(out.matches("--- ").count(), 3, "{out}");
    assert!(out.contains("VIP  PPS  BPS\nweb    0    0\n"), "{out}");
    assert!(out.contains("web 198.51.100.1:8080    0    0"), "{out}");
    assert!(out.contains("drops: none"), "{out}");

    let json = d.ok(&["stats", "--watch", "--json", "--interval", "0.1", "--count", "2"]);
    let lines: Vec<serde_json::Value> = json.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{json}");
    assert_eq!(lines[0]["vips"][0]["name"], "web");
    assert!(lines[0]["seconds"].as_f64().unwrap() > 0.05, "{json}");

    // --interval and --count belong to --watch; a bad interval is a usage error.
    assert_eq!(d.fails(&["stats", "--count", "2"]).0, 2);
    assert_eq!(d.fails(&["stats", "--watch", "--interval", "0"]).0, 2);
}

#[test]
fn backends_undrain_undoes_a_drain() {
    let d = Daemon::start();
    d.ok(&["backends", "drain", "web", "198.51.100.1:8080"]);
    assert_eq!(
        d.ok(&["backends", "undrain", "web", "198.51.100.1:8080"]),
        "web: backend 198.51.100.1:8080 undrained: takes new flows again (once healthy)\n"
    );
    let (code, err) = d.fails(&["backends", "undrain", "web", "198.51.100.1:8080"]);
    assert_eq!(code, 1);
    assert!(err.contains("is not drained"), "{err}");
}

#[test]
fn top_without_a_terminal_points_to_stats_watch() {
    let d = Daemon::start();
    let (code, err) = d.fails(&["top"]);
    assert_eq!(code, 1);
    assert!(err.contains("stats --watch"), "{err}");
}

/// The daemon's stderr as it logs at start, with stderr a pipe (not a terminal); `extra` is
/// added to the configuration file.
fn daemon_log(extra: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run").join("test0.sock");
    std::fs::write(dir.path().join("lb.toml"), config(&socket, extra)).unwrap();
    let child = Command::new(BIN)
        .args(["attach", "test0", "--fake-dataplane", "--log-format", "text", "--config"])
        .arg(dir.path().join("lb.toml"))
        .arg("--state-dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut d = Daemon { child: Some(child), dir, socket };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !d.run(&["status"]).status.success() {
        assert!(Instant::now() < deadline, "the daemon did not answer within 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let child = d.child.take().unwrap();
    // SAFETY: kill on the pid of a child this test started and has not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn no_colour_codes_when_stderr_is_not_a_terminal() {
    let log = daemon_log("");
    assert!(log.contains(" INFO "), "the daemon logs at info by default: {log}");
    assert!(!log.contains("\x1b["), "ANSI escape codes in a log written to a pipe: {log:?}");
}

#[test]
fn the_log_level_may_come_from_defaults() {
    let log = daemon_log("[defaults]\nlog_level = \"warn\"\n");
    assert!(!log.contains(" INFO "), "[defaults] log_level = \"warn\" lets no info line through: {log}");
    let log = daemon_log("[defaults]\nlog_level = \"debug\"\n");
    assert!(log.contains(" INFO "), "{log}");
}
