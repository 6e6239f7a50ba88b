//! One daemon per balancer: `attach` holds an exclusive lock beside the saved ids for its whole
//! life, so that `detach` sees a running daemon whatever control socket it serves on, and a
//! second `attach` of the same interface is refused before it touches the first one's pins.
use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};

use crate::paths::AttachPaths;

/// The lock of a running daemon; let go (and its file removed) when dropped.
pub struct InstanceLock {
    file: File,
    path: PathBuf,
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        // Removed while still held: nobody can take a lock on a file on its way out.
        let _ = std::fs::remove_file(&self.path);
        let _ = &self.file;
    }
}

fn try_lock(file: &File) -> bool {
    // SAFETY: flock on a file descriptor we own.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// The pid a lock file names, as the daemon that holds it wrote it.
fn holder(path: &Path) -> String {
    std::fs::read_to_string(path).map(|t| t.trim().to_string()).unwrap_or_default()
}

/// Takes the lock of the balancer at `paths`; an error naming the running daemon if another
/// holds it.
pub fn acquire(paths: &AttachPaths) -> io::Result<InstanceLock> {
    let path = paths.lock_file();
    let mut file = std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&path)?;
    if !try_lock(&file) {
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("a daemon (pid {}) is running for these pins (it holds {})", holder(&path), path.display()),
        ));
    }
    file.set_len(0)?;
    writeln!(file, "{}", std::process::id())?;
    Ok(InstanceLock { file, path })
}

/// The pid of the daemon running for the balancer at `paths`, if one is.
pub fn running(paths: &AttachPaths) -> Option<String> {
    let path = paths.lock_file();
    let file = File::open(&path).ok()?;
    (!try_lock(&file)).then(|| holder(&path))
}
