//! Moving a map's contents from its pinned older layout into this build's new map, while the
//! old program keeps forwarding through the old one.
//!
//! Copy, swap, copy again: [`Migrating::copy`] converts every entry of the old map into the
//! new (the old program still runs and still records flows in the old map); the caller then
//! swaps the program in the pinned link (one atomic replace: packets go to either program,
//! never to none); [`Migrating::finish`] copies again what the old program changed since the
//! first pass, unless the new program has already written that entry itself (its write is
//! newer), and only then replaces the old pins with the new maps. The old maps go when their
//! last holder does: the old program, once no packet runs it.
//!
//! A failed copy removes what it made and leaves the old maps and program as they were.
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd};
use std::path::{Path, PathBuf};

use aya::Ebpf;
use aya::maps::{MapData, MapInfo, MapType};

use super::layout::{Convert, Move};
use super::{Result, err};

/// The bpf(2) commands used here (uapi/linux/bpf.h).
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;

/// `union bpf_attr` as the element commands read it.
#[repr(C)]
#[derive(Default)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

fn bpf(cmd: libc::c_long, attr: &ElemAttr) -> std::io::Result<()> {
    // SAFETY: bpf(2) with an attribute of the size passed; the buffers it points to live
    // across the call and are as large as the map's key and value.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *const ElemAttr, size_of::<ElemAttr>()) };
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// One map as raw bytes: its descriptor, key size and the bytes of one value (all CPUs').
struct Raw {
    data: MapData,
    key_size: usize,
    value_size: usize,
    /// Bytes of one CPU's value, and whether values are per CPU.
    cpu_value: usize,
    array: bool,
    entries: u32,
}

impl Raw {
    fn open(path: &Path) -> Result<Raw> {
        let data = MapData::from_pin(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
        let info: MapInfo = data.info().map_err(|e| err(format!("{}: {e}", path.display())))?;
        let map_type = info.map_type().map_err(|e| err(format!("{}: {e}", path.display())))?;
        let per_cpu = matches!(map_type, MapType::PerCpuArray | MapType::PerCpuHash | MapType::LruPerCpuHash);
        let array = matches!(map_type, MapType::Array | MapType::PerCpuArray);
        let cpu_value = info.value_size() as usize;
        let cpus = if per_cpu { aya::util::nr_cpus().map_err(|(what, e)| err(format!("{what}: {e}")))? } else { 1 };
        let value_size = if per_cpu { cpu_value.next_multiple_of(8) * cpus } else { cpu_value };
        Ok(Raw { data, key_size: info.key_size() as usize, value_size, cpu_value, array, entries: info.max_entries() })
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.data.fd().as_fd()
    }

    fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut value = vec![0u8; self.value_size];
        let attr = ElemAttr {
            map_fd: self.fd().as_raw_fd() as u32,
            key: key.as_ptr() as u64,
            value: value.as_mut_ptr() as u64,
            ..Default::default()
        };
        match bpf(BPF_MAP_LOOKUP_ELEM, &attr) {
            Ok(()) => Ok(Some(value)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(err(format!("reading a map entry: {e}"))),
        }
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let attr = ElemAttr {
            map_fd: self.fd().as_raw_fd() as u32,
            key: key.as_ptr() as u64,
            value: value.as_ptr() as u64,
            ..Default::default()
        };
        bpf(BPF_MAP_UPDATE_ELEM, &attr).map_err(|e| err(format!("writing a map entry: {e}")))
    }

    /// Every key: the indices of an array, the keys of a hash map.
    fn keys(&self) -> Result<Vec<Vec<u8>>> {
        if self.array {
            return Ok((0..self.entries).map(|i| i.to_ne_bytes().to_vec()).collect());
        }
        let mut keys = Vec::new();
        let mut next = vec![0u8; self.key_size];
        loop {
            let attr = ElemAttr {
                map_fd: self.fd().as_raw_fd() as u32,
                key: keys.last().map_or(0, |k: &Vec<u8>| k.as_ptr() as u64),
                value: next.as_mut_ptr() as u64,
                ..Default::default()
            };
            match bpf(BPF_MAP_GET_NEXT_KEY, &attr) {
                Ok(()) => keys.push(next.clone()),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(keys),
                Err(e) => return Err(err(format!("listing a map's keys: {e}"))),
            }
        }
    }

    /// `value` (all CPUs') converted by `convert`, one CPU's part at a time.
    fn converted(&self, mut value: Vec<u8>, convert: Convert) -> Vec<u8> {
        for part in value.chunks_mut(self.value_size.min(self.cpu_value.next_multiple_of(8))) {
            convert(&mut part[..self.cpu_value]);
        }
        value
    }
}

/// One map being migrated.
struct MapMove {
    name: &'static str,
    old: Raw,
    new: Raw,
    /// Where the new map waits, pinned, until the swap.
    staged: PathBuf,
    convert: Convert,
    /// The old map's entries as the first pass read them.
    first: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// Counts of a finished migration, for the log.
#[derive(Debug, Default, Clone, Copy)]
pub struct Moved {
    /// Entries copied by the first pass.
    pub copied: usize,
    /// Entries the old program changed during the first pass, copied again.
    pub recopied: usize,
    /// Entries both programs wrote: the new program's kept.
    pub kept_new: usize,
}

/// The maps of one migration, copied once, waiting for the swap.
pub struct Migrating {
    dir: PathBuf,
    maps: Vec<MapMove>,
}

/// Where map `name`'s new map waits for the swap: `NAME_MIGRATING` (bpffs refuses a dot in a
/// pin's name).
pub fn staged_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}_MIGRATING"))
}

impl Migrating {
    /// Pins the new maps of `moves` (name, from version, conversion) next to the old ones and
    /// copies the old ones into them.
    pub fn copy(ebpf: &Ebpf, dir: &Path, moves: &[Move]) -> Result<Migrating> {
        let mut migrating = Migrating { dir: dir.to_path_buf(), maps: Vec::new() };
        for &(name, from, convert) in moves {
            let staged = staged_path(dir, name);
            let _ = std::fs::remove_file(&staged);
            let map = ebpf.map(name).ok_or_else(|| err(format!("{name}: no such map in the object")))?;
            map.pin(&staged).map_err(|e| err(format!("pinning {}: {e}", staged.display())))?;
            let opened = Raw::open(&dir.join(name)).and_then(|old| Ok((old, Raw::open(&staged)?)));
            let (old, new) = match opened {
                Ok(pair) => pair,
                Err(e) => {
                    let _ = std::fs::remove_file(&staged);
                    migrating.abandon();
                    return Err(e);
                }
            };
            migrating.maps.push(MapMove { name, old, new, staged, convert, first: Vec::new() });
            let map = migrating.maps.last_mut().expect("just pushed");
            if let Err(e) = map.first_pass() {
                migrating.abandon();
                return Err(err(format!("migrating {name} from layout version {from}: {e}")));
            }
        }
        Ok(migrating)
    }

    /// Removes the new maps' pins: the old maps and program stay as they were.
    pub fn abandon(self) {
        for map in &self.maps {
            let _ = std::fs::remove_file(&map.staged);
        }
    }

    /// After the swap: the second pass, then the new maps take the old ones' pins.
    pub fn finish(self) -> Result<Moved> {
        let mut moved = Moved::default();
        for map in &self.maps {
            map.second_pass(&mut moved)?;
        }
        for map in &self.maps {
            let pin = self.dir.join(map.name);
            // rename(2) within bpffs replaces the old pin in one step.
            std::fs::rename(&map.staged, &pin)
                .map_err(|e| err(format!("moving {} to {}: {e}", map.staged.display(), pin.display())))?;
        }
        Ok(moved)
    }
}

impl MapMove {
    fn first_pass(&mut self) -> Result<usize> {
        if self.old.key_size != self.new.key_size || self.old.value_size != self.new.value_size {
            return Err(err("the old and new maps' sizes differ"));
        }
        for key in self.old.keys()? {
            let value = self.old.lookup(&key)?;
            if let Some(value) = &value {
                self.new.update(&key, &self.new.converted(value.clone(), self.convert))?;
            }
            self.first.push((key, value));
        }
        Ok(self.first.len())
    }

    fn second_pass(&self, moved: &mut Moved) -> Result<()> {
        moved.copied += self.first.iter().filter(|(_, v)| v.is_some()).count();
        for (key, first) in &self.first {
            let now = self.old.lookup(key)?;
            if now == *first {
                continue;
            }
            let Some(now) = now else { continue };
            let expected = first.clone().map(|v| self.new.converted(v, self.convert));
            if self.new.lookup(key)? == expected {
                self.new.update(key, &self.new.converted(now, self.convert))?;
                moved.recopied += 1;
            } else {
                moved.kept_new += 1;
            }
        }
        // Keys the old program added to a hash map during the first pass.
        if !self.old.array {
            for key in self.old.keys()? {
                if self.first.iter().any(|(k, _)| *k == key) || self.new.lookup(&key)?.is_some() {
                    continue;
                }
                if let Some(value) = self.old.lookup(&key)? {
                    self.new.update(&key, &self.new.converted(value, self.convert))?;
                    moved.recopied += 1;
                }
            }
        }
        Ok(())
    }
}

/// Removes new maps a migration left staged (a start that died between its copy and the
/// swap): the old pins are still the running balancer's.
pub fn remove_staged(dir: &Path, names: &[&str]) {
    for name in names {
        let _ = std::fs::remove_file(staged_path(dir, name));
    }
}
