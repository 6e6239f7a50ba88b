//! `lb-bench dataplane --profile`: where lb_ingress spends its time, by line of its source.
//!
//! While the rows run, `perf record` samples the benchmark's CPU with the `cpu-clock` event
//! (no hardware counters needed, which virtual machines often lack). Each sample inside the
//! JIT-compiled program is then placed on the source line that the kernel's line table gives
//! for its address: `jited_line_info` (JIT address of each line record) and `line_info` (its
//! file and line in the program's BTF), from `BPF_OBJ_GET_INFO_BY_FD`. `perf annotate` and
//! `bpftool prog dump jited` would do the same, but Debian builds both without the
//! disassembler library they need for BPF.
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};
use aya::programs::Xdp;

/// Samples a second: dense enough for a few hundred thousand packets' worth of samples.
const FREQUENCY: &str = "20000";
/// Source lines shown.
const TOP: usize = 40;

/// `perf record` running on one CPU.
pub struct Sampler {
    perf: Child,
    data: tempfile::NamedTempFile,
}

impl Sampler {
    pub fn start(cpu: u32) -> Result<Sampler> {
        let data = tempfile::Builder::new().prefix("lb-bench-perf").suffix(".data").tempfile()?;
        let path = data.path().to_str().context("utf-8 path")?;
        let perf = Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-F", FREQUENCY, "-C", &cpu.to_string(), "-o", path])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("perf record (Debian package linux-perf)")?;
        // perf opens its events before the first row runs.
        std::thread::sleep(Duration::from_millis(500));
        Ok(Sampler { perf, data })
    }

    /// Stops sampling: the samples, by the symbol and offset each fell at.
    pub fn stop(mut self) -> Result<Samples> {
        // SAFETY: a signal to our own child; SIGINT makes perf write its data and exit.
        unsafe { libc::kill(self.perf.id() as i32, libc::SIGINT) };
        self.perf.wait()?;
        let out = Command::new("perf")
            .args(["script", "-F", "ip,sym,symoff", "-i"])
            .arg(self.data.path())
            .output()
            .context("perf script")?;
        Ok(Samples(String::from_utf8_lossy(&out.stdout).into_owned()))
    }
}

/// `perf script` lines: `ADDRESS SYMBOL+0xOFFSET`.
pub struct Samples(String);

impl Samples {
    /// Prints the samples inside `program` (named `name`) by source line, most first.
    pub fn report(&self, program: &Xdp, name: &str) -> Result<()> {
        let table = LineTable::of(program)?;
        let marker = format!("_{name}+0x");
        let mut by_line: HashMap<&str, usize> = HashMap::new();
        let mut total = 0;
        for symbol in self.0.lines().filter_map(|l| l.split_whitespace().nth(1)).filter(|s| s.starts_with("bpf_prog_"))
        {
            let Some(at) = symbol.find(&marker) else { continue };
            let offset = &symbol[at + marker.len()..];
            let Ok(offset) = u64::from_str_radix(offset, 16) else { continue };
            *by_line.entry(table.line_at(offset)).or_default() += 1;
            total += 1;
        }
        if total == 0 {
            println!("--- profile: no sample fell inside {name} ---");
            return Ok(());
        }
        let mut lines: Vec<_> = by_line.into_iter().collect();
        lines.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        println!("--- profile: {name}, {total} cpu-clock samples inside it, by source line (top {TOP}) ---");
        for (line, n) in lines.into_iter().take(TOP) {
            println!("{:5.1}%  {line}", 100.0 * n as f64 / total as f64);
        }
        Ok(())
    }
}

/// The JIT offsets where each source line's code starts, in order.
pub struct LineTable {
    starts: Vec<(u64, String)>,
}

impl LineTable {
    /// The source line (`text  @ file:line`) of the code at `offset` in the JIT image.
    pub fn line_at(&self, offset: u64) -> &str {
        let at = self.starts.partition_point(|(start, _)| *start <= offset);
        at.checked_sub(1).map_or("(before the first line record)", |i| self.starts[i].1.as_str())
    }

    /// The line table of a loaded program.
    pub fn of(program: &Xdp) -> Result<LineTable> {
        let fd = program.fd()?.as_fd().as_raw_fd();
        let first = ProgInfo::get(fd, ProgInfo::zeroed())?;
        let (lines, ksyms) = (first.u32(NR_LINE_INFO) as usize, first.u32(NR_JITED_KSYMS) as usize);
        let mut line_info = vec![0u8; lines * LINE_INFO_SIZE];
        let mut jited_lines = vec![0u64; lines];
        let mut ksym = vec![0u64; ksyms.max(1)];
        let mut ask = ProgInfo::zeroed();
        ask.put_u32(NR_JITED_KSYMS, ksyms as u32);
        ask.put_u64(JITED_KSYMS, ksym.as_mut_ptr() as u64);
        ask.put_u32(NR_LINE_INFO, lines as u32);
        ask.put_u64(LINE_INFO, line_info.as_mut_ptr() as u64);
        ask.put_u32(LINE_INFO_REC_SIZE, LINE_INFO_SIZE as u32);
        ask.put_u32(NR_JITED_LINE_INFO, lines as u32);
        ask.put_u64(JITED_LINE_INFO, jited_lines.as_mut_ptr() as u64);
        ask.put_u32(JITED_LINE_INFO_REC_SIZE, 8);
        ProgInfo::get(fd, ask)?;
        let strings = btf_strings(first.u32(BTF_ID))?;
        let text = |at: u32| {
            let rest = strings.get(at as usize..).unwrap_or(&[]);
            let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end]).into_owned()
        };
        let mut starts: Vec<(u64, String)> = line_info
            .chunks_exact(LINE_INFO_SIZE)
            .zip(&jited_lines)
            .map(|(record, address)| {
                let word = |i: usize| u32::from_ne_bytes(record[i * 4..i * 4 + 4].try_into().unwrap());
                let file = text(word(1));
                let file = file.rsplit('/').next().unwrap_or("").to_string();
                (address.wrapping_sub(ksym[0]), format!("{}  @ {file}:{}", text(word(2)).trim(), word(3) >> 10))
            })
            .collect();
        starts.sort_by_key(|(start, _)| *start);
        Ok(LineTable { starts })
    }

    /// Line records in the table.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }
}

// `struct bpf_prog_info` (linux/bpf.h, a stable kernel ABI): the offsets of the fields used.
const PROG_INFO_SIZE: usize = 232;
const NR_JITED_KSYMS: usize = 104;
const JITED_KSYMS: usize = 112;
const BTF_ID: usize = 128;
const NR_LINE_INFO: usize = 148;
const LINE_INFO: usize = 152;
const JITED_LINE_INFO: usize = 160;
const NR_JITED_LINE_INFO: usize = 168;
const LINE_INFO_REC_SIZE: usize = 172;
const JITED_LINE_INFO_REC_SIZE: usize = 176;
/// `struct bpf_line_info`: instruction offset, file name, line text, line and column.
const LINE_INFO_SIZE: usize = 16;

const BPF_OBJ_GET_INFO_BY_FD: i64 = 15;
const BPF_BTF_GET_FD_BY_ID: i64 = 19;

/// A `bpf_prog_info` as bytes, 8-byte aligned.
struct ProgInfo([u64; PROG_INFO_SIZE / 8]);

impl ProgInfo {
    fn zeroed() -> ProgInfo {
        ProgInfo([0; PROG_INFO_SIZE / 8])
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the array's own bytes.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), PROG_INFO_SIZE) }
    }

    fn u32(&self, at: usize) -> u32 {
        let word = self.0[at / 8].to_ne_bytes();
        let half = at % 8;
        u32::from_ne_bytes(word[half..half + 4].try_into().unwrap())
    }

    fn put_u32(&mut self, at: usize, v: u32) {
        self.bytes()[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }

    fn put_u64(&mut self, at: usize, v: u64) {
        self.bytes()[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    }

    /// Fills `info` (its counts and buffers say what to fill) for program `fd`.
    fn get(fd: i32, mut info: ProgInfo) -> Result<ProgInfo> {
        let len = PROG_INFO_SIZE as u32;
        get_info(fd, info.bytes().as_mut_ptr(), len).context("BPF_OBJ_GET_INFO_BY_FD (program)")?;
        Ok(info)
    }
}

/// `BPF_OBJ_GET_INFO_BY_FD`: `len` bytes of the object's info into `info`.
fn get_info(fd: i32, info: *mut u8, len: u32) -> std::io::Result<()> {
    // union bpf_attr's `info` member: bpf_fd, info_len, info (pointer).
    let mut attr = [0u64; 8];
    attr[0] = fd as u32 as u64 | (len as u64) << 32;
    attr[1] = info as u64;
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr).map(drop)
}

fn bpf(cmd: i64, attr: &mut [u64; 8]) -> std::io::Result<i64> {
    // SAFETY: bpf(2) with a zero-padded attribute union of the size given.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), size_of::<[u64; 8]>()) };
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(rc) }
}

/// The string section of BTF object `id`: where line records' file names and text live.
fn btf_strings(id: u32) -> Result<Vec<u8>> {
    let mut attr = [0u64; 8];
    attr[0] = id as u64;
    let fd = bpf(BPF_BTF_GET_FD_BY_ID, &mut attr).context("BPF_BTF_GET_FD_BY_ID")? as i32;
    // SAFETY: a descriptor the kernel just gave us, owned from here.
    let _owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // `struct bpf_btf_info`: btf (pointer), btf_size, id, name, name_len, kernel_btf.
    let mut info = [0u64; 4];
    get_info(fd, info.as_mut_ptr().cast(), 32).context("BPF_OBJ_GET_INFO_BY_FD (BTF)")?;
    let size = info[1] as u32;
    let mut btf = vec![0u8; size as usize];
    info = [btf.as_mut_ptr() as u64, size as u64, 0, 0];
    get_info(fd, info.as_mut_ptr().cast(), 32).context("BPF_OBJ_GET_INFO_BY_FD (BTF data)")?;
    // `struct btf_header`: magic, version, flags, hdr_len, type_off, type_len, str_off, str_len.
    let word = |i: usize| u32::from_ne_bytes(btf[i..i + 4].try_into().unwrap()) as usize;
    let (header, strings, len) = (word(4), word(16), word(20));
    btf.get(header + strings..header + strings + len).map(<[u8]>::to_vec).context("BTF string section out of bounds")
}
