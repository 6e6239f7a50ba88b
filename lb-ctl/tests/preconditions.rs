//! `attach` checks what it needs from the host before touching anything, and says the fix:
//! root, and IP forwarding for NAT VIPs (tested in a network namespace made here). Needs root:
//! prints SKIPPED without it, and fails in CI (env CI set).
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_lb-ctl");

fn is_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "{test} needs root, and CI must run it");
    println!("SKIPPED (needs root): {test}");
    false
}

/// A network namespace of this run, removed on drop.
struct Netns(String);

impl Netns {
    fn new(suffix: &str) -> Netns {
        let name = format!("lbt-{}-{suffix}", std::process::id());
        let out = Command::new("ip").args(["netns", "add", &name]).output().unwrap();
        assert!(out.status.success(), "ip netns add {name}: {}", String::from_utf8_lossy(&out.stderr));
        Netns(name)
    }

    /// A command that runs `lb-ctl` in the namespace.
    fn lb_ctl(&self) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.0)).arg(BIN);
        c
    }

    fn sysctl(&self, file: &str) -> String {
        let out = Command::new("ip").args(["netns", "exec", &self.0, "cat", file]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A daemon process, stopped (by pid) on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

/// A configuration with one NAT VIP, its socket in `dir`; the path of the file.
fn nat_config(dir: &Path) -> (PathBuf, PathBuf) {
    let socket = dir.join("lb.sock");
    let text = format!(
        "[daemon]\napi_socket = \"{}\"\nring_size = 251\n\n[[vip]]\naddress = \"203.0.113.10\"\nport = 80\n\
         backends = [ {{ address = \"198.51.100.1\", port = 8080 }} ]\n",
        socket.display()
    );
    let path = dir.join("lb.toml");
    std::fs::write(&path, text).unwrap();
    (path, socket)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn attach_with_forwarding_off_names_the_sysctl_and_enable_forwarding_turns_it_on() {
    if !is_root("attach_with_forwarding_off_names_the_sysctl_and_enable_forwarding_turns_it_on") {
        return;
    }
    let ns = Netns::new("fwd");
    assert_eq!(ns.sysctl("/proc/sys/net/ipv4/ip_forward"), "0", "a new namespace starts with forwarding off");
    let dir = tempfile::tempdir().unwrap();
    let (config, socket) = nat_config(dir.path());
    let attach = |extra: &[&str]| {
        let mut c = ns.lb_ctl();
        c.args(["attach", "lo", "--fake-dataplane", "--log-level", "warn", "--state-dir"])
            .arg(dir.path())
            .arg("--config")
            .arg(&config)
            .args(extra);
        c
    };

    let out = attach(&[]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("net.ipv4.ip_forward=0"), "{}", stderr(&out));
    assert!(stderr(&out).contains("--enable-forwarding"), "{}", stderr(&out));
    assert!(!socket.exists(), "nothing was started");
    assert_eq!(ns.sysctl("/proc/sys/net/ipv4/ip_forward"), "0");

    let host_forwarding = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
    let _daemon = Running(attach(&["--enable-forwarding"]).stdout(Stdio::null()).spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !Command::new(BIN).arg("--socket").arg(&socket).arg("status").output().unwrap().status.success() {
        assert!(Instant::now() < deadline, "the daemon did not answer within 10 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(ns.sysctl("/proc/sys/net/ipv4/ip_forward"), "1");
    assert_eq!(ns.sysctl("/proc/sys/net/ipv4/conf/lo/forwarding"), "1");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap(),
        host_forwarding,
        "only the namespace changed"
    );
}

#[test]
fn attach_without_root_says_to_use_sudo() {
    if !is_root("attach_without_root_says_to_use_sudo") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (config, socket) = nat_config(dir.path());
    let nobody = 65534;
    let out =
        Command::new(BIN).args(["attach", "lo", "--config"]).arg(&config).uid(nobody).gid(nobody).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stderr(&out), "lb-ctl: lb-ctl attach needs root (CAP_BPF and CAP_NET_ADMIN): run it with sudo\n");
    assert!(!socket.exists());
}
