//! One BPF_PROG_TEST_RUN of an XDP program: frame in, verdict and frame out.
use aya::programs::{TestRun, TestRunOptions, Xdp};

/// What the program did with a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    pub action: u32,
    pub output: Vec<u8>,
}

/// Runs `program` once on `frame`, as if received on `ingress_ifindex` (queue 0).
pub fn run_xdp(program: &Xdp, frame: &[u8], ingress_ifindex: u32) -> RunResult {
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex.
    let ctx: [u32; 6] = [0, frame.len() as u32, 0, ingress_ifindex, 0, 0];
    let ctx_bytes: Vec<u8> = ctx.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let mut out = vec![0u8; frame.len() + 256];
    let mut opts = TestRunOptions::new();
    opts.data_in = Some(frame);
    opts.data_out = Some(&mut out);
    opts.ctx_in = Some(&ctx_bytes);
    let result = program.test_run(opts).expect("BPF_PROG_TEST_RUN");
    out.truncate(result.data_size_out as usize);
    RunResult { action: result.return_value, output: out }
}

/// XDP action names, for readable failures.
pub fn action_name(action: u32) -> &'static str {
    match action {
        0 => "XDP_ABORTED",
        1 => "XDP_DROP",
        2 => "XDP_PASS",
        3 => "XDP_TX",
        4 => "XDP_REDIRECT",
        _ => "unknown",
    }
}

/// Pins this thread to the CPU it runs on, and returns that CPU. The program keeps per-CPU
/// state (the next-hop cache, the new-flow budget, Katran's connection table): a test or a
/// benchmark that moved between CPUs mid-run would find another CPU's.
pub fn pin_to_this_cpu() -> anyhow::Result<u32> {
    // SAFETY: plain libc calls on this thread, with a cpu_set_t of the size given.
    unsafe {
        let cpu = libc::sched_getcpu();
        anyhow::ensure!(cpu >= 0, "sched_getcpu: {}", std::io::Error::last_os_error());
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        anyhow::ensure!(
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) == 0,
            "pinning to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
        Ok(cpu as u32)
    }
}
