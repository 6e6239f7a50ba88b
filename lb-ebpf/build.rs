//! Rebuild the objects when the linker changes (a reinstalled bpf-linker may emit other code).
fn main() {
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
