//! Network namespaces for tests: named with a per-run prefix, removed on drop (also when a test
//! panics), and leftovers of dead runs removed before use.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Output};

/// Runs a command, panicking with its output when it fails.
pub fn sh(args: &[&str]) -> Output {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("running {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

static PREFIX: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Names what this process creates `PREFIX-<pid>-…` instead of the suites' `lbt-<pid>-…` (the
/// demo uses `lbd`, the lab benchmark `lbb`). Call it before the first namespace; later calls
/// are ignored.
pub fn set_run_prefix(prefix: &'static str) {
    let _ = PREFIX.set(prefix);
}

fn prefix() -> &'static str {
    PREFIX.get_or_init(|| "lbt")
}

/// A name unique to this process: `lbt-<pid>-<suffix>` (see [`set_run_prefix`]). Interface
/// names are limited to 15 bytes, so suffixes should be short.
pub fn run_name(suffix: &str) -> String {
    format!("{}-{}-{suffix}", prefix(), std::process::id())
}

/// The pid in a name `lbt-<pid>-…`, if the name has that form.
fn run_pid(name: &str) -> Option<u32> {
    name.strip_prefix(prefix())?.strip_prefix('-')?.split('-').next()?.parse().ok()
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name: "pid (comm) S ...".
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

/// Removes bpffs pin directories `/sys/fs/bpf/lbt-<pid>-*` whose process is gone, and the
/// run directories `$TMPDIR/lbt-<pid>-*` of the daemons it started.
fn remove_stale_pins() {
    let Ok(dirs) = std::fs::read_dir("/sys/fs/bpf") else { return };
    for dir in dirs.flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        if run_pid(&name).is_some_and(is_dead) {
            if let Ok(files) = std::fs::read_dir(dir.path()) {
                for f in files.flatten() {
                    let _ = std::fs::remove_file(f.path());
                }
            }
            let _ = std::fs::remove_dir(dir.path());
        }
    }
    let Ok(dirs) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for dir in dirs.flatten() {
        if run_pid(&dir.file_name().to_string_lossy()).is_some_and(is_dead) {
            let _ = std::fs::remove_dir_all(dir.path());
        }
    }
}

/// Removes namespaces, pin and run directories named `lbt-<pid>-*` whose process is gone (a
/// crashed or killed earlier run; the processes it started died with it, see
/// [`die_with_parent`]).
pub fn remove_stale() {
    remove_stale_pins();
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if run_pid(name).is_some_and(is_dead) {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// Makes `command`'s process receive SIGKILL when the thread that started it ends, so a run
/// killed outright (SIGKILL, a crash) leaves no daemon or backend running in a namespace.
pub fn die_with_parent(command: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: prctl is async-signal-safe and touches only the child being started.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// A network namespace that exists as long as this value does.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(suffix: &str) -> Netns {
        remove_stale();
        let name = run_name(suffix);
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        sh(&["ip", "netns", "add", &name]);
        let ns = Netns { name };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// Runs a command inside the namespace, panicking on failure.
    pub fn exec(&self, args: &[&str]) -> Output {
        let mut full = vec!["ip", "netns", "exec", self.name.as_str()];
        full.extend_from_slice(args);
        sh(&full)
    }

    /// Moves the calling thread into the namespace until the guard is dropped.
    pub fn enter(&self) -> Entered {
        enter_named(&self.name)
    }
}

/// Moves the calling thread into the named namespace (`/run/netns/NAME`) until the guard is
/// dropped. For threads that hold only the name of a [`Netns`] owned elsewhere.
pub fn enter_named(name: &str) -> Entered {
    let original = File::open("/proc/thread-self/ns/net").expect("open own netns");
    let target = File::open(format!("/run/netns/{name}")).expect("open netns");
    // SAFETY: setns on valid namespace fds; affects only this thread.
    let rc = unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {name}: {}", std::io::Error::last_os_error());
    Entered { original }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// While alive, the thread is inside a namespace; dropping it returns to the original one.
pub struct Entered {
    original: File,
}

impl Drop for Entered {
    fn drop(&mut self) {
        // SAFETY: setns back to the namespace we came from.
        unsafe { libc::setns(self.original.as_raw_fd(), libc::CLONE_NEWNET) };
    }
}

/// The index of interface `name` in the calling thread's namespace.
pub fn ifindex(name: &str) -> u32 {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid C string.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert_ne!(index, 0, "no interface {name}");
    index
}
