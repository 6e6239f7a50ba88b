//! The docs cannot drift from the code: the reference pages (docs/configuration.md,
//! docs/dataplane.md, docs/api.md, docs/cli.md) are checked against the configuration types,
//! lb-common's counter table, the API router and the clap definition; every relative link and
//! anchor of README.md and docs/*.md must resolve; and their `console` blocks run with trycmd.
//! Each test prints exactly what is missing.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::CommandFactory as _;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("lb-ctl lives in the workspace").to_path_buf()
}

fn read(relative: &str) -> String {
    let path = repo().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// README.md and every page of docs/, as paths relative to the repository.
fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("a readable docs/ entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The lines of `text` outside fenced code blocks (headings and links there are not Markdown).
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push(line);
        }
    }
    lines
}

/// Fails listing `missing`, which `page` should name.
fn assert_documented(page: &str, what: &str, missing: &[String]) {
    assert!(missing.is_empty(), "{page} does not document these {what}:\n  {}\n", missing.join("\n  "));
}

// (a) configuration keys ---------------------------------------------------------------------

/// The keys the table at `path` (tables, or `[]` for an array of tables) accepts, read from the
/// types themselves: a file with an unknown key there is refused with serde's list of the keys
/// the table knows. None when no table of keys belongs there.
fn keys_at(path: &[(String, bool)]) -> Option<Vec<String>> {
    const PROBE: &str = "zz_probe";
    let mut value = toml::Value::Table(toml::Table::from_iter([(PROBE.to_string(), toml::Value::Integer(1))]));
    for (key, array) in path.iter().rev() {
        let inner = if *array { toml::Value::Array(vec![value]) } else { value };
        value = toml::Value::Table(toml::Table::from_iter([(key.clone(), inner)]));
    }
    let text = toml::to_string(&value).expect("a probe serializes");
    let err = lb_ctl::config::Config::parse(&text, Path::new("probe.toml")).err()?.to_string();
    let expected = err.lines().find_map(|l| l.split_once(&format!("unknown field `{PROBE}`, expected ")))?.1;
    Some(expected.split('`').skip(1).step_by(2).map(str::to_string).collect())
}

fn keys_under(path: Vec<(String, bool)>, out: &mut BTreeSet<String>) {
    let Some(keys) = keys_at(&path) else { return };
    for key in keys {
        out.insert(key.clone());
        for array in [false, true] {
            let mut deeper = path.clone();
            deeper.push((key.clone(), array));
            if keys_at(&deeper).is_some() {
                keys_under(deeper, out);
                break;
            }
        }
    }
}

/// Every key of a TOML document, at every depth.
fn keys_of(value: &toml::Value, out: &mut BTreeSet<String>) {
    match value {
        toml::Value::Table(table) => {
            for (key, value) in table {
                out.insert(key.clone());
                keys_of(value, out);
            }
        }
        toml::Value::Array(items) => items.iter().for_each(|v| keys_of(v, out)),
        _ => {}
    }
}

/// A key is documented when docs/configuration.md names it as code: `` `key` `` (a table as
/// `` `[key]` `` or `` `[[key]]` `` too).
#[test]
fn configuration_md_documents_every_key() {
    let mut keys = BTreeSet::new();
    keys_under(Vec::new(), &mut keys);
    // The walk reaches the deepest tables (a check of the walk itself).
    for deep in ["ring_size", "min_healthy", "rise", "weight", "h2_max_streams", "chain", "names", "max_ejection"] {
        assert!(keys.contains(deep), "the walk over the configuration types missed {deep}: {keys:?}");
    }
    // And every key the example writes.
    keys_of(&toml::from_str(&read("lb-ctl/lb.toml.example")).expect("lb.toml.example is TOML"), &mut keys);
    let page = read("docs/configuration.md");
    let named = |k: &str| [format!("`{k}`"), format!("`[{k}]`"), format!("`[[{k}]]`")].iter().any(|n| page.contains(n));
    let missing: Vec<String> = keys.into_iter().filter(|k| !named(k)).collect();
    assert_documented("docs/configuration.md", "configuration keys", &missing);
}

// (b) counters -------------------------------------------------------------------------------

/// Every counter of lb-common's tables has a row in docs/dataplane.md: `` | `name` | ``.
#[test]
fn dataplane_md_documents_every_counter() {
    use lb_common::stats::{Counter, DecapCounter};
    let page = read("docs/dataplane.md");
    let names = Counter::ALL.iter().map(|c| c.name()).chain(DecapCounter::ALL.iter().map(|c| c.name()));
    let missing: Vec<String> =
        names.filter(|n| !page.contains(&format!("| `{n}` |"))).map(|n| format!("| `{n}` | ... |")).collect();
    assert_documented("docs/dataplane.md", "counters (a table row each)", &missing);
}

// (c) API routes -----------------------------------------------------------------------------

/// `(method, path)` of every `.route(...)` in `source`, read from the router's own text (axum
/// cannot list a router's routes). A route's methods are the `get(`/`post(`/... calls in it.
fn routes_in(source: &str, prefix: &str) -> Vec<(String, String)> {
    let mut routes = Vec::new();
    for call in source.split(".route(").skip(1) {
        let path = call.split('"').nth(1).expect("a route's path is its first string");
        let code: String = call.split(".route(").next().unwrap_or(call).to_string();
        for method in ["get", "post", "put", "delete", "patch"] {
            let called = code
                .match_indices(&format!("{method}("))
                .any(|(at, _)| !code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':'));
            if called {
                routes.push((method.to_uppercase(), format!("{prefix}{path}")));
            }
        }
    }
    routes
}

/// Every route has a row in docs/api.md: `| METHOD | `/path` ...` (a query may follow the path).
#[test]
fn api_md_documents_every_route() {
    let server = read("lb-ctl/src/api/server.rs");
    let router = server.split("pub fn router").nth(1).expect("server.rs defines router()");
    let (control, metrics) = router.split_once("pub fn metrics_router").expect("server.rs defines metrics_router()");
    let metrics = metrics.split("\nfn ").next().unwrap_or(metrics);
    let prefix = lb_ctl::api::types::PREFIX;
    let mut routes = routes_in(control, prefix);
    assert!(routes.len() >= 10, "the router's routes were not found: {routes:?}");
    routes.extend(routes_in(metrics, ""));
    let page = read("docs/api.md");
    let rows: Vec<&str> = prose_lines(&page).into_iter().filter(|l| l.starts_with('|')).collect();
    let missing: Vec<String> = routes
        .iter()
        .filter(|(method, path)| {
            !rows.iter().any(|row| {
                let cells: Vec<&str> = row.split('|').map(str::trim).collect();
                cells.contains(&method.as_str())
                    && cells
                        .iter()
                        .any(|c| c.strip_prefix(&format!("`{path}")).is_some_and(|r| r.starts_with(['`', '['])))
            })
        })
        .map(|(method, path)| format!("| {method} | `{path}` | ... |"))
        .collect();
    assert_documented("docs/api.md", "routes (a table row each)", &missing);
}

/// The route table in the API module's header points at docs/api.md rather than keeping a copy.
#[test]
fn the_api_module_points_at_docs_api_md() {
    let header = read("lb-ctl/src/api/mod.rs");
    assert!(header.contains("docs/api.md"), "lb-ctl/src/api/mod.rs should point at docs/api.md");
}

// (d) CLI subcommands ------------------------------------------------------------------------

fn subcommands(command: &clap::Command, path: &str, out: &mut Vec<String>) {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let sub_path = format!("{path} {}", sub.get_name());
        out.push(sub_path.clone());
        subcommands(sub, &sub_path, out);
    }
}

/// Every visible subcommand, nested ones included, is named in docs/cli.md as `` `lb-ctl SUB ``.
#[test]
fn cli_md_documents_every_subcommand() {
    let mut commands = Vec::new();
    subcommands(&lb_ctl::cli::args::Cli::command(), "lb-ctl", &mut commands);
    let page = read("docs/cli.md");
    let missing: Vec<String> = commands
        .into_iter()
        .filter(|c| !page.contains(&format!("`{c} ")) && !page.contains(&format!("`{c}`")))
        .collect();
    assert_documented("docs/cli.md", "subcommands", &missing);
}

// (e) links and anchors ----------------------------------------------------------------------

/// GitHub's anchor for a heading: lower case, punctuation dropped (letters, digits, spaces,
/// `-` and `_` kept), spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown page; a repeated heading gets `-1`, `-2`, ... as on GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else { continue };
        let base = slug(heading.trim_start_matches('#'));
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The targets of inline links and images, `[text](target)`, outside code.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose_lines(text) {
        // Inline code is not a link.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        for (at, _) in prose.match_indices("](") {
            let rest = &prose[at + 2..];
            if let Some(end) = rest.find(')') {
                targets.push(rest[..end].split_whitespace().next().unwrap_or("").to_string());
            }
        }
    }
    targets
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = read(&page);
        let dir = repo().join(&page).parent().expect("a page is in a directory").to_path_buf();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').map_or((target.as_str(), None), |(f, a)| (f, Some(a)));
            let path = if file.is_empty() { repo().join(&page) } else { dir.join(file) };
            if !path.exists() {
                broken.push(format!("{page}: ({target}): no such file {}", path.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let known = std::fs::read_to_string(&path).map(|t| anchors(&t)).unwrap_or_default();
                if !known.contains(anchor) {
                    broken.push(format!("{page}: ({target}): no heading with anchor #{anchor}"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "links that do not resolve:\n  {}\n", broken.join("\n  "));
}

#[test]
fn anchors_follow_github() {
    assert_eq!(slug(" The writer's rollback"), "the-writers-rollback");
    assert_eq!(slug(" `[vip.proxy]`"), "vipproxy");
    assert_eq!(slug(" Scale-out: several balancers behind ECMP"), "scale-out-several-balancers-behind-ecmp");
    assert_eq!(anchors("# A\n```\n# not a heading\n```\n## A\n"), BTreeSet::from(["a".into(), "a-1".into()]));
}

// (f) examples -------------------------------------------------------------------------------

/// The `console` blocks of README.md and docs/*.md run with trycmd, from the repository's
/// root as a reader at a checkout would run them. Commands that need root, a lab or run until
/// stopped are written in `sh` blocks and not run. trycmd takes a case's working directory
/// from a `NAME.in` directory beside it, so each page is copied into a temporary directory
/// with `NAME.in` pointing at the repository (to update the pages' expected output, copy
/// what the failure prints).
#[test]
fn console_examples_run() {
    let cases = tempfile::tempdir().expect("a temporary directory");
    let mut any = false;
    for page in pages() {
        let text = read(&page);
        if !text.lines().any(|l| l.trim_start().starts_with("```console")) {
            continue;
        }
        any = true;
        let name = page.replace('/', "--");
        std::fs::write(cases.path().join(&name), &text).expect("writing a case");
        let dir = cases.path().join(Path::new(&name).with_extension("in"));
        std::os::unix::fs::symlink(repo(), dir).expect("linking the repository as the case's directory");
    }
    assert!(any, "no page has a console example: the README's quick start should have one");
    trycmd::TestCases::new()
        .register_bin("lb-ctl", Path::new(env!("CARGO_BIN_EXE_lb-ctl")))
        .case(cases.path().join("*.md"))
        .run();
}
