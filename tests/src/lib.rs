//! Support for the root-requiring suites: privilege checks that fail in CI instead of
//! skipping, network namespaces that clean up after themselves, and BPF_PROG_TEST_RUN.
pub mod balancer;
pub mod fixture;
pub mod lab;
pub mod netns;
pub mod packets;
pub mod privileges;
pub mod testrun;
