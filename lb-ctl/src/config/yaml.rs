//! `lb.yaml`: the schema of lb.toml, written in YAML. The YAML document is rewritten as TOML text
//! with one value per line, and each TOML line remembers the YAML line it came from: the file
//! is then checked by the same code as a TOML one, and every mistake names the YAML line.
//!
//! Mappings become tables (`[vip.health]`), sequences of mappings arrays of tables (`[[vip]]`,
//! `[[vip.backends]]`), and any other sequence an array with one element a line (mappings in it
//! inline). Anchors and aliases are refused: the
//! file should say each thing once, where it applies (`[defaults]` is the way to share).
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};
use yaml_rust2::yaml::Yaml;

/// A YAML file as TOML text, with the YAML line of each TOML line.
pub(super) struct Translated {
    pub toml: String,
    /// `yaml_lines[n]`: the YAML line of TOML line `n + 1`.
    yaml_lines: Vec<usize>,
}

impl Translated {
    /// The YAML line that TOML line `line` (1-based) came from.
    pub fn yaml_line(&self, line: usize) -> usize {
        let last = self.yaml_lines.len().saturating_sub(1);
        self.yaml_lines.get(line.saturating_sub(1).min(last)).copied().unwrap_or(1)
    }
}

/// A mistake in the YAML itself: its line and what is wrong.
pub(super) type YamlError = (usize, String);

/// Rewrites `text` as TOML (see the module's documentation).
pub(super) fn translate(text: &str) -> Result<Translated, YamlError> {
    let mut tree = TreeBuilder::default();
    Parser::new_from_str(text).load(&mut tree, false).map_err(|e| scan_error(text, e.marker().line(), e.info()))?;
    if let Some(error) = tree.error {
        return Err(error);
    }
    let mut out = Translated { toml: String::new(), yaml_lines: Vec::new() };
    match tree.root {
        None => Ok(out),
        Some(Node::Map { entries, .. }) => {
            section(&mut out, "", &entries)?;
            Ok(out)
        }
        Some(other) => Err((other.line(), "the document must be a mapping (daemon:, defaults:, vip:)".into())),
    }
}

/// A mistake the YAML scanner found, in the file's words. A tab in an indentation is reported
/// by the scanner at the scalar before it (a line early): name the line the tab is on.
fn scan_error(text: &str, line: usize, info: &str) -> YamlError {
    if !info.contains("found a tab") {
        return (line, info.to_string());
    }
    let indented_by_tab = |l: &&str| l.chars().take_while(|c| c.is_whitespace()).any(|c| c == '\t');
    let tab_line = text.lines().enumerate().skip(line.saturating_sub(1)).find(|(_, l)| indented_by_tab(l));
    let at = tab_line.map_or(line, |(i, _)| i + 1);
    (at, "a tab indents this line: YAML indents with spaces only".into())
}

/// A YAML node with the line where it starts.
enum Node {
    Scalar { value: Yaml, line: usize },
    Seq { items: Vec<Node>, line: usize },
    Map { entries: Vec<(String, Node)>, line: usize },
}

impl Node {
    fn line(&self) -> usize {
        match self {
            Node::Scalar { line, .. } | Node::Seq { line, .. } | Node::Map { line, .. } => *line,
        }
    }
    fn is_map(&self) -> bool {
        matches!(self, Node::Map { .. })
    }
}

/// Builds the [`Node`] tree from the parser's events.
#[derive(Default)]
struct TreeBuilder {
    /// Open sequences and mappings (a mapping's children alternate key, value).
    open: Vec<(bool, Vec<Node>, usize)>,
    root: Option<Node>,
    error: Option<YamlError>,
}

impl TreeBuilder {
    fn fail(&mut self, line: usize, message: &str) {
        self.error.get_or_insert((line, message.to_string()));
    }

    fn finish(&mut self, node: Node) {
        match self.open.last_mut() {
            Some((_, children, _)) => children.push(node),
            None => self.root = Some(node),
        }
    }

    fn close(&mut self) {
        let Some((is_map, children, line)) = self.open.pop() else { return };
        if !is_map {
            return self.finish(Node::Seq { items: children, line });
        }
        let mut entries = Vec::new();
        let mut children = children.into_iter();
        while let (Some(key), Some(mut value)) = (children.next(), children.next()) {
            // An empty value is seen where the next token starts: name the key's line.
            if let Node::Scalar { value: Yaml::Null, line } = &mut value {
                *line = key.line();
            }
            match key {
                Node::Scalar { value: Yaml::String(k), .. } => entries.push((k, value)),
                Node::Scalar { value: Yaml::Integer(k), .. } => entries.push((k.to_string(), value)),
                other => self.fail(other.line(), "a key must be a plain name"),
            }
        }
        self.finish(Node::Map { entries, line });
    }
}

impl MarkedEventReceiver for TreeBuilder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        let line = mark.line();
        match event {
            Event::Scalar(text, style, _, tag) => {
                let value = scalar(text, style, tag.as_ref());
                self.finish(Node::Scalar { value, line });
            }
            Event::SequenceStart(..) => self.open.push((false, Vec::new(), line)),
            Event::MappingStart(..) => self.open.push((true, Vec::new(), line)),
            Event::SequenceEnd | Event::MappingEnd => self.close(),
            Event::Alias(_) => self.fail(line, "aliases (*name) are not supported: write the value, or use defaults:"),
            _ => {}
        }
    }
}

/// A scalar's value: plain ones are typed by YAML's core schema, quoted ones and `!!str` are
/// strings.
fn scalar(text: String, style: TScalarStyle, tag: Option<&Tag>) -> Yaml {
    let forced_string = tag.is_some_and(|t| t.suffix == "str");
    if style == TScalarStyle::Plain && !forced_string { Yaml::from_str(&text) } else { Yaml::String(text) }
}

impl Translated {
    fn line(&mut self, text: String, yaml_line: usize) {
        self.toml.push_str(&text);
        self.toml.push('\n');
        self.yaml_lines.push(yaml_line);
    }
}

/// Writes the table at `path` (written by the caller as a `[path]` or `[[path]]` header):
/// its values first (TOML sets a table's keys before its sub-tables), then each mapping as a
/// `[path.key]` sub-table and each sequence of mappings as `[[path.key]]` sections. Headers,
/// not dotted keys: the spans toml gives to dotted-key tables are not usable.
fn section(out: &mut Translated, path: &str, entries: &[(String, Node)]) -> Result<(), YamlError> {
    let is_table = |node: &Node| matches!(node, Node::Map { entries, .. } if !entries.is_empty());
    let is_sections =
        |node: &Node| matches!(node, Node::Seq { items, .. } if !items.is_empty() && items.iter().all(Node::is_map));
    let inner = |key: &str| if path.is_empty() { toml_key(key) } else { format!("{path}.{}", toml_key(key)) };
    for (key, node) in entries.iter().filter(|(_, n)| !is_table(n) && !is_sections(n)) {
        value(out, &toml_key(key), node)?;
    }
    for (key, node) in entries.iter().filter(|(_, n)| is_table(n)) {
        let Node::Map { entries, line } = node else { unreachable!("filtered above") };
        out.line(format!("[{}]", inner(key)), *line);
        section(out, &inner(key), entries)?;
    }
    for (key, node) in entries.iter().filter(|(_, n)| is_sections(n)) {
        let Node::Seq { items, .. } = node else { unreachable!("filtered above") };
        for item in items {
            let Node::Map { entries, line } = item else { unreachable!("filtered above") };
            out.line(format!("[[{}]]", inner(key)), *line);
            section(out, &inner(key), entries)?;
        }
    }
    Ok(())
}

/// Writes `key = value`; a sequence as an array with one element a line.
fn value(out: &mut Translated, key: &str, node: &Node) -> Result<(), YamlError> {
    match node {
        Node::Seq { items, line } => {
            out.line(format!("{key} = ["), *line);
            for item in items {
                out.line(format!("  {},", inline(item)?), item.line());
            }
            out.line("]".into(), *line);
        }
        _ => out.line(format!("{key} = {}", inline(node)?), node.line()),
    }
    Ok(())
}

/// A value on one line: scalars, inline arrays and inline tables.
fn inline(node: &Node) -> Result<String, YamlError> {
    Ok(match node {
        Node::Scalar { value, line } => match value {
            Yaml::String(s) => toml_string(s),
            Yaml::Integer(i) => i.to_string(),
            Yaml::Boolean(b) => b.to_string(),
            Yaml::Real(text) => match text.parse::<f64>() {
                Ok(f) if f.is_finite() => format!("{f:?}"),
                _ => return Err((*line, format!("{text:?} is not a number this file can use"))),
            },
            _ => return Err((*line, "a value is missing here (null)".into())),
        },
        Node::Seq { items, .. } => {
            let items: Result<Vec<String>, YamlError> = items.iter().map(inline).collect();
            format!("[{}]", items?.join(", "))
        }
        Node::Map { entries, .. } => {
            let fields: Result<Vec<String>, YamlError> =
                entries.iter().map(|(k, v)| Ok(format!("{} = {}", toml_key(k), inline(v)?))).collect();
            format!("{{ {} }}", fields?.join(", "))
        }
    })
}

/// A key as TOML writes it: bare when it can be.
fn toml_key(key: &str) -> String {
    let bare = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare { key.to_string() } else { toml_string(key) }
}

/// A basic TOML string on one line (newlines escaped, so lines stay one value each).
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
