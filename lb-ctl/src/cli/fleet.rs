//! `lb-ctl fleet push|diff|status`: the fleet's state in etcd, from any machine that reaches
//! it. The file's `[fleet]` table says where (endpoints, prefix, TLS); no daemon is needed.
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Subcommand;

use crate::config::Config;
use crate::config::fleet::FleetSettings;
use crate::fleet::record::{FleetStatus, NodeRecord, compare};
use crate::fleet::{Store, state};

#[derive(Subcommand)]
pub enum FleetCommand {
    /// Check FILE, then make its VIPs and backends (and [defaults]) the fleet's, in one etcd
    /// transaction: refused if the fleet changed since it was read (another operator).
    Push {
        /// The file (lb.toml) with a [fleet] table saying where the fleet is.
        file: PathBuf,
    },
    /// What `fleet push FILE` would change, key by key (exit 0 either way).
    Diff {
        /// The file (lb.toml) with a [fleet] table.
        file: PathBuf,
    },
    /// Every node of the fleet: the revision it applied, whether its rings equal the others',
    /// and backends every node sees down.
    Status {
        /// A file (lb.toml) with a [fleet] table.
        #[arg(long, short = 'c')]
        config: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(command: FleetCommand) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        match command {
            FleetCommand::Push { file } => push(&file, false).await,
            FleetCommand::Diff { file } => push(&file, true).await,
            FleetCommand::Status { config, json } => status(&config, json).await,
        }
    })
}

/// The `[fleet]` of `file`, which must be valid.
fn settings(file: &Path) -> anyhow::Result<FleetSettings> {
    let config =
        Config::load(file).map_err(|e| anyhow::anyhow!("{} has mistakes, nothing was done:\n{e}", file.display()))?;
    match config.fleet {
        Some(f) => Ok(f),
        None => bail!("{} has no [fleet] table: add one with endpoints and prefix (docs/scale-out.md)", file.display()),
    }
}

async fn push(file: &Path, dry_run: bool) -> anyhow::Result<ExitCode> {
    let settings = settings(file)?;
    let values = state::values_of_file(file)
        .map_err(|e| anyhow::anyhow!("{} has mistakes, nothing was pushed:\n{e}", file.display()))?;
    let mut store = Store::connect(&settings).await?;
    let seen = store.read().await?;
    let lines = state::diff(&seen.values, &values);
    for line in &lines {
        println!("{line}");
    }
    if dry_run {
        if lines.is_empty() {
            println!("no change: the fleet {} holds this file's VIPs (revision {})", settings.prefix, seen.revision);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if lines.is_empty() {
        println!(
            "no change: the fleet {} already holds this file's VIPs (revision {})",
            settings.prefix, seen.revision
        );
        return Ok(ExitCode::SUCCESS);
    }
    let why = format!("fleet push {}", file.display());
    let revision = store.write(&seen, &values, &why).await?;
    println!("pushed to the fleet {} at revision {revision}: every node applies it", settings.prefix);
    Ok(ExitCode::SUCCESS)
}

async fn status(file: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let settings = settings(file)?;
    let mut store = Store::connect(&settings).await?;
    let fleet = store.read().await?;
    let mut records = Vec::new();
    for (name, text) in store.nodes().await? {
        let record: NodeRecord =
            serde_json::from_str(&text).with_context(|| format!("node {name}: unreadable record"))?;
        records.push(record);
    }
    let status = compare(fleet.generation, records);
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", render(&settings.prefix, &status));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn render(prefix: &str, s: &FleetStatus) -> String {
    let mut out = format!("fleet {prefix}: revision {}, {} node(s)\n", s.revision, s.nodes.len());
    out.push_str(&format!("{:<16} {:>9} {:<8} {:<10} {}\n", "NODE", "APPLIED", "CURRENT", "RINGS", "NOTES"));
    for n in &s.nodes {
        let r = &n.record;
        let mut notes = Vec::new();
        if !n.current {
            notes.push(format!("lags the fleet (revision {})", s.revision));
        }
        if !n.rings_agree {
            notes.push(format!("rings differ: {}", n.rings_differ.join(", ")));
        }
        if let Some(refused) = &r.refused {
            notes.push(format!("refused {refused}"));
        }
        if r.node_drained {
            notes.push("node drained".into());
        }
        out.push_str(&format!(
            "{:<16} {:>9} {:<8} {:<10} {}\n",
            r.name,
            r.applied_revision,
            if n.current { "yes" } else { "no" },
            if n.rings_agree { "equal" } else { "DIFFER" },
            notes.join("; ")
        ));
    }
    for b in &s.down_everywhere {
        out.push_str(&format!("down on every node: {b}\n"));
    }
    out
}

/// `lb-ctl status`'s line for a node in a fleet.
pub fn status_line(f: &crate::fleet::record::FleetView) -> String {
    let link = match (f.connected, &f.error) {
        (true, _) => "etcd connected".to_string(),
        (false, Some(e)) => format!("etcd LOST ({e}): forwarding with the last applied state"),
        (false, None) => "etcd not reached yet: forwarding with the saved state".to_string(),
    };
    let mut line =
        format!("fleet       {} as {:?}: revision {} applied, {link}\n", f.prefix, f.node, f.applied_revision);
    if let Some(r) = &f.refused {
        line.push_str(&format!("fleet       REFUSED {r}\n"));
    }
    if f.rings_differ {
        line.push_str("fleet       RINGS DIFFER from most nodes' (`lb-ctl fleet status`)\n");
    }
    line
}
