//! The program a start found on a running balancer's pinned link, kept until the start is
//! done: a start that fails after putting its own program on the link puts this one back, so
//! the balancer forwards as it did before (its maps are the pinned ones either way). Held by
//! descriptor: once the link runs another program, this descriptor is all that keeps it loaded.
use std::os::fd::{AsFd as _, AsRawFd as _};
use std::path::{Path, PathBuf};

use aya::programs::ProgramFd;
use aya::programs::links::FdLink;

use super::pins::{bpf, obj_get};
use super::{Result, err};

/// bpf(2)'s BPF_LINK_UPDATE (uapi/linux/bpf.h).
const BPF_LINK_UPDATE: libc::c_long = 29;
/// Replace only if the link still runs the program named in `old_prog_fd`.
const BPF_F_REPLACE: u32 = 1 << 2;

/// `union bpf_attr` as BPF_LINK_UPDATE reads it.
#[repr(C)]
struct LinkUpdateAttr {
    link_fd: u32,
    new_prog_fd: u32,
    flags: u32,
    old_prog_fd: u32,
}

/// The program a pinned link ran before this start replaced it.
pub struct PreviousProgram {
    program: ProgramFd,
    id: u32,
    link_path: PathBuf,
    /// The id of the program this start put on the link in its place.
    replaced_by: u32,
}

impl PreviousProgram {
    /// The program `link` (pinned at `link_path`) runs now, held open, as this start is about
    /// to put its own (id `replaced_by`) there.
    pub fn of(link: &FdLink, link_path: &Path, replaced_by: u32) -> Result<PreviousProgram> {
        let id = link.info().map_err(|e| err(format!("{}: {e}", link_path.display())))?.program_id();
        let program = program_by_id(id)?;
        Ok(PreviousProgram { program, id, link_path: link_path.to_path_buf(), replaced_by })
    }

    /// Puts the program back on the link in place of the failed start's: only if the link
    /// still runs that one, so a program someone else put there meanwhile stays.
    pub fn put_back(self) -> Result<()> {
        let link = obj_get(&self.link_path)?;
        let current = program_by_id(self.replaced_by)?;
        let attr = LinkUpdateAttr {
            link_fd: link.as_raw_fd() as u32,
            new_prog_fd: self.program.as_fd().as_raw_fd() as u32,
            flags: BPF_F_REPLACE,
            old_prog_fd: current.as_fd().as_raw_fd() as u32,
        };
        bpf(BPF_LINK_UPDATE, &attr)
            .map_err(|e| err(format!("putting program {} back on {}: {e}", self.id, self.link_path.display())))?;
        tracing::info!(program = self.id, "the failed start put the balancer's program back on the link");
        Ok(())
    }
}

/// A descriptor of the loaded program `id`.
fn program_by_id(id: u32) -> Result<ProgramFd> {
    aya::programs::loaded_programs()
        .filter_map(|info| info.ok())
        .find(|info| info.id() == id)
        .ok_or_else(|| err(format!("program {id} is no longer loaded")))?
        .fd()
        .map_err(|e| err(format!("opening program {id}: {e}")))
}
