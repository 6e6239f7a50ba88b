//! `cargo xtask setup`: makes a fresh machine ready to build the XDP programs and run every
//! suite. Each step checks first and only acts when something is missing, so it is cheap to
//! run every time (`cargo xtask test` does).
use anyhow::{Context as _, bail};

use crate::util::{cmd, is_root, output, step};

/// bpf-linker's version: 0.13 is the line that links for aya-ebpf 0.2 with LLVM 22.
const BPF_LINKER_VERSION: &str = "0.13.0";
/// The LLVM major version of the nightly toolchain; bpf-linker must use the same one.
const LLVM_MAJOR: &str = "22";
/// Debian packages the suites use: ip/bridge/veth (iproute2), ethtool (offloads off on veths),
/// ping (neighbour warm-up), sysctl (procps), systemd-analyze (systemd: the install tests verify
/// the installed units), promtool (prometheus: the shipped alert rules are checked with it) and
/// headless chromium with a font (the status page is tested in a browser; fonts are only
/// recommended by chromium, and recommends are not installed), BIRD 2 (the scale-out
/// suite announces VIPs over BGP to a router namespace) and nft (nftables: the export test
/// checks the generated ruleset with `nft -c`), etcd (the fleet suites
/// start a real etcd cluster) and protoc with the protobuf well-known types (etcd-client's build script compiles
/// etcd's protobufs).
pub(crate) const DEBIAN_PACKAGES: &[&str] = &[
    "iproute2",
    "ethtool",
    "iputils-ping",
    "procps",
    "systemd",
    "prometheus",
    "chromium",
    "fonts-liberation",
    "bird2",
    "nftables",
    // `[fleet]`: the tests start a real etcd; etcd-client's build script needs protoc and the
    // well-known types etcd's protobufs import (google/protobuf/descriptor.proto, struct.proto),
    // which are in libprotobuf-dev: protobuf-compiler only recommends it.
    "etcd-server",
    "etcd-client",
    "protobuf-compiler",
    "libprotobuf-dev",
    // `bench dataplane --katran DIR` builds Katran's balancer as its Makefile-bpf does.
    "clang",
    "llvm",
    // The completion tests drive each shell's own completion machinery.
    "zsh",
    "fish",
];

pub fn run() -> anyhow::Result<()> {
    nightly()?;
    bpf_linker()?;
    debian_packages(DEBIAN_PACKAGES)?;
    println!("setup: ready");
    Ok(())
}

fn nightly() -> anyhow::Result<()> {
    let toolchains = output("rustup", &["toolchain", "list"]).context("rustup is required")?;
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        step("installing the nightly toolchain (builds the eBPF target)");
        cmd("rustup", &["toolchain", "install", "nightly", "--profile", "minimal"])?;
    }
    let components =
        output("rustup", &["component", "list", "--toolchain", "nightly", "--installed"]).unwrap_or_default();
    if !components.lines().any(|l| l.starts_with("rust-src")) {
        step("adding rust-src to nightly (build-std=core for bpfel-unknown-none)");
        cmd("rustup", &["component", "add", "rust-src", "--toolchain", "nightly"])?;
    }
    // The test command lints both toolchains' crates and checks formatting.
    for (toolchain, component) in [("nightly", "clippy"), ("stable", "clippy"), ("stable", "rustfmt")] {
        let installed =
            output("rustup", &["component", "list", "--toolchain", toolchain, "--installed"]).unwrap_or_default();
        if !installed.lines().any(|l| l.starts_with(component)) {
            step(&format!("adding {component} to {toolchain}"));
            cmd("rustup", &["component", "add", component, "--toolchain", toolchain])?;
        }
    }
    Ok(())
}

fn bpf_linker() -> anyhow::Result<()> {
    if output("bpf-linker", &["--version"]).is_some_and(|v| v.contains(BPF_LINKER_VERSION)) {
        return Ok(());
    }
    // Link bpf-linker against the nightly toolchain's own libLLVM, so its LLVM matches the
    // bitcode rustc emits. The library's file name is read from the sysroot, not assumed.
    let sysroot = output("rustc", &["+nightly", "--print", "sysroot"]).context("rustc +nightly")?;
    let lib_dir = format!("{}/lib", sysroot.trim());
    let llvm = std::fs::read_dir(&lib_dir)
        .with_context(|| format!("reading {lib_dir}"))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|name| Some(name.strip_prefix("lib")?.strip_suffix(".so")?.to_string()))
        .find(|name| name.starts_with(&format!("LLVM-{LLVM_MAJOR}")));
    let Some(llvm) = llvm else {
        bail!(
            "no libLLVM-{LLVM_MAJOR} in {lib_dir}: nightly's LLVM must be {LLVM_MAJOR} for bpf-linker {BPF_LINKER_VERSION}"
        );
    };
    step(&format!("building bpf-linker {BPF_LINKER_VERSION} against nightly's {llvm} (about a minute)"));
    let rustflags = format!("-L native={lib_dir} -l dylib={llvm} -C link-arg=-Wl,-rpath,{lib_dir}");
    let status = std::process::Command::new("cargo")
        .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION, "--locked", "--no-default-features"])
        .args(["--features", &format!("llvm-{LLVM_MAJOR},no-llvm-linking")])
        .env("RUSTFLAGS", rustflags)
        .status()?;
    if !status.success() {
        bail!("cargo install bpf-linker failed: {status}");
    }
    Ok(())
}

/// Installs the Debian packages of `packages` that are missing (as root; otherwise says which).
pub fn debian_packages(packages: &[&str]) -> anyhow::Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| {
            !output("dpkg-query", &["-W", "-f=${Status}", p]).is_some_and(|s| s.contains("install ok installed"))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!("missing Debian packages {missing:?}: run `sudo apt-get install -y {}`", missing.join(" "));
    }
    step(&format!("installing Debian packages: {}", missing.join(" ")));
    cmd("apt-get", &["update", "-qq"])?;
    let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    args.extend(&missing);
    cmd("apt-get", &args)
}
