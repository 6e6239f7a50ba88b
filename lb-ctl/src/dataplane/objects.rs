//! The XDP objects, built by build.rs (aya-build) and embedded in the binary.
use aya::include_bytes_aligned;

/// The balancer object (program `lb_ingress` and its maps).
pub static INGRESS: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-ingress"));
/// The decapsulator object (programs `lb_decap` and `lb_pass`).
pub static DECAP: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lb-decap"));

/// Whether the objects were really built (AYA_BUILD_SKIP leaves empty placeholders).
pub fn available() -> bool {
    !INGRESS.is_empty() && !DECAP.is_empty()
}

#[cfg(test)]
mod tests {
    use object::{Object as _, ObjectSection as _};

    /// bpf_tail_call's helper number.
    const TAIL_CALL: i32 = 12;

    /// One BPF instruction as the object holds it (8 bytes, little-endian).
    #[derive(Clone, Copy)]
    struct Insn {
        code: u8,
        dst: u8,
        src: u8,
        off: i16,
        imm: i32,
    }

    fn decode(bytes: &[u8]) -> Vec<Insn> {
        bytes
            .chunks_exact(8)
            .map(|b| Insn {
                code: b[0],
                dst: b[1] & 0x0f,
                src: b[1] >> 4,
                off: i16::from_le_bytes([b[2], b[3]]),
                imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            })
            .collect()
    }

    /// Indexes that some conditional or unconditional jump lands on.
    fn jump_targets(insns: &[Insn]) -> std::collections::HashSet<i64> {
        const JMP: u8 = 0x05;
        const JMP32: u8 = 0x06;
        const CALL: u8 = 0x80;
        const EXIT: u8 = 0x90;
        insns
            .iter()
            .enumerate()
            .filter(|(_, i)| matches!(i.code & 0x07, JMP | JMP32) && !matches!(i.code & 0xf0, CALL | EXIT))
            .map(|(at, i)| at as i64 + 1 + i64::from(i.off))
            .collect()
    }

    /// The tail calls of `insns` that the verifier could not make direct jumps, and the count
    /// of tail calls. Direct means patched into the JIT's code (no retpoline, no bounds check),
    /// which the verifier does only where the index is one constant on every path to the call:
    /// here, `r3 = <constant>` right before the call, and no jump landing on the call itself.
    fn indirect_tail_calls(insns: &[Insn]) -> (Vec<String>, usize) {
        let targets = jump_targets(insns);
        let mut found = Vec::new();
        let mut calls = 0;
        for (at, insn) in insns.iter().enumerate() {
            // BPF_JMP | BPF_CALL of a helper (src 0), not of a function of the object.
            if insn.code != 0x85 || insn.src != 0 || insn.imm != TAIL_CALL {
                continue;
            }
            calls += 1;
            // BPF_ALU64 | BPF_MOV | BPF_K into r3: the index, one constant.
            let constant = at.checked_sub(1).is_some_and(|b| insns[b].code == 0xb7 && insns[b].dst == 3);
            if !constant {
                found.push(format!("instruction {at}: the index is not a constant set just before the call"));
            } else if targets.contains(&(at as i64)) {
                found.push(format!("instruction {at}: a jump lands on the call, past its constant index"));
            }
        }
        (found, calls)
    }

    /// LLVM once merged two of lb_ingress's jumps into one call fed from either path, and every
    /// IPv6 packet then took an indirect jump, which only the benchmark showed (`maps::jump`).
    #[test]
    fn every_tail_call_of_the_balancer_is_direct() {
        assert!(super::available(), "the XDP objects were not built (AYA_BUILD_SKIP): this test reads them");
        let file = object::File::parse(super::INGRESS).expect("the ingress object is an ELF file");
        let mut calls = 0;
        for section in file.sections().filter(|s| s.name() == Ok("xdp")) {
            let (indirect, found) = indirect_tail_calls(&decode(section.data().expect("section data")));
            assert!(indirect.is_empty(), "tail calls the verifier would leave indirect: {indirect:?}");
            calls += found;
        }
        // lb_ingress's jumps to lb_ingress_v6 and lb_icmp_errors, the trace jumps, and the rest.
        assert!(calls >= 4, "only {calls} tail calls found: is the program section still `xdp`?");
    }

    fn insn(code: u8, dst: u8, off: i16, imm: i32) -> Insn {
        Insn { code, dst, src: 0, off, imm }
    }

    #[test]
    fn a_merged_or_computed_index_is_told() {
        let mov_r3 = |k| insn(0xb7, 3, 0, k);
        let call = insn(0x85, 0, 0, TAIL_CALL);
        let exit = insn(0x95, 0, 0, 0);
        // Two paths, each with its constant, meeting on one call: `if r1 == 0 goto +2`.
        let merged = [insn(0x15, 1, 2, 0), mov_r3(1), insn(0x05, 0, 1, 0), mov_r3(2), call, exit];
        assert_eq!(indirect_tail_calls(&merged).0.len(), 1);
        // The index from another register.
        let computed = [insn(0xbf, 3, 0, 0), call, exit];
        assert_eq!(indirect_tail_calls(&computed).0.len(), 1);
        // One constant, one path.
        assert_eq!(indirect_tail_calls(&[mov_r3(1), call, exit]), (vec![], 1));
    }
}
