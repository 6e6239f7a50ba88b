//! The command line: `args` defines it, `start` runs the daemon (`attach`, `proxy`), `local`
//! runs the commands that need no daemon, `client` the ones that ask a running daemon, and
//! `docs` prints completions and man pages, and
//! `render` prints the daemon's answers (kept apart so it can be tested).
pub mod args;
mod backend_setup;
pub mod client;
pub mod docs;
pub mod export;
pub mod fleet;
pub mod instance;
pub mod local;
mod quick;
pub mod rates;
pub mod render;
pub mod start;
pub mod top;
pub mod trace;
mod verify;
