//! The benchmarks, all in one place (`cargo xtask bench …` builds and runs `lb-bench`). They
//! print figures, peers and floors measured in the same run, and assert nothing.
pub mod cluster;
pub mod control;
pub mod cpu;
pub mod dataplane;
mod dataplane6;
pub mod fleet;
pub mod flood;
pub mod flows;
pub mod katran;
mod katran_build;
pub mod lab;
pub mod line_profile;
mod messages;
pub mod proxy;
mod quic;
pub mod report;
pub mod stats;
