//! The daemon's log: tracing to stderr (plain text or JSON, colours only on a terminal), with a
//! filter that `--log-level` sets for the process's life, or else `[daemon] log_level`, which a
//! reload may change.
use std::io::IsTerminal as _;
use std::sync::OnceLock;

use anyhow::Context as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// Set when the file's level is in force (no `--log-level`): a reload may change it.
static FILE_LEVEL: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Where the level comes from.
pub enum Level<'a> {
    /// `--log-level`: fixed for the process's life.
    CommandLine(&'a str),
    /// `[daemon] log_level`: followed on reload.
    File(&'a str),
}

/// Starts logging (once per process).
pub fn init(json: bool, level: Level<'_>) -> anyhow::Result<()> {
    let (text, from_file) = match level {
        Level::CommandLine(t) => (t, false),
        Level::File(t) => (t, true),
    };
    let filter = EnvFilter::try_new(text).with_context(|| format!("log level {text:?}"))?;
    let (filter, handle) = reload::Layer::new(filter);
    let fmt = tracing_subscriber::fmt::layer().with_ansi(std::io::stderr().is_terminal()).with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    if json { registry.with(fmt.json()).try_init() } else { registry.with(fmt).try_init() }
        .context("starting the log")?;
    // A JSON log gets the proxy's access lines as fields of their own, not as a string.
    lb_proxy::log_access_as_fields(json);
    if from_file {
        let _ = FILE_LEVEL.set(handle);
    }
    Ok(())
}

/// Applies a reloaded file's `log_level`, unless `--log-level` fixed it. True when applied.
pub fn follow_file(level: &str) -> bool {
    let Some(handle) = FILE_LEVEL.get() else { return false };
    match EnvFilter::try_new(level) {
        Ok(filter) => handle.reload(filter).is_ok(),
        Err(_) => false,
    }
}
