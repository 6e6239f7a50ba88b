//! Every unknown key of a file, not only the first.
//!
//! serde stops at the first mistake it meets, and `deny_unknown_fields` makes an unknown key such a
//! mistake. The file is deserialized again after each unknown key, with that key and its value
//! blanked out of the text (spaces, newlines kept, so every other span and line stays where it
//! was), until it deserializes or meets a mistake of another kind. The key-value to blank is
//! found in toml's own span-keeping document ([`toml::de::DeTable`]), not by scanning the text.
//!
//! Why not `serde_ignored` (collect ignored keys in one pass with `deny_unknown_fields` removed):
//! the `[vip.proxy]` types are lb-proxy's, which must keep refusing unknown keys for everything
//! else that deserializes them; and `serde_ignored` gives a key's path only, while each message
//! here lists the keys the table accepts (serde's `expected one of ...`), which only the type
//! knows. Blank-and-retry keeps both, at every depth and with no schema kept by hand.
use std::ops::Range;

use serde::de::DeserializeOwned;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// At most this many unknown keys are reported (and passes made).
const MOST: usize = 200;

/// What deserializing `T` from a file found.
pub(super) struct Deserialized<T> {
    /// The file's contents; None when a mistake other than an unknown key stopped it.
    pub raw: Option<T>,
    /// The text with every unknown key blanked out: what later checks read (same lines).
    pub text: String,
    /// Each mistake with the span it names, when it names one.
    pub mistakes: Vec<(Option<Range<usize>>, String)>,
}

/// Deserializes `text`, reporting every unknown key (see the module's documentation).
/// Mistakes are in the file's order (serde meets a table's keys in its own order).
pub(super) fn deserialize<T: DeserializeOwned>(text: &str) -> Deserialized<T> {
    let mut found = passes::<T>(text);
    found.mistakes.sort_by_key(|(span, _)| span.as_ref().map_or(usize::MAX, |s| s.start));
    found
}

fn passes<T: DeserializeOwned>(text: &str) -> Deserialized<T> {
    let mut text = text.to_string();
    let mut mistakes = Vec::new();
    // After a mistake of another kind (a value of the wrong type, say) the file cannot be
    // used, but the search for unknown keys goes on without that key; what follows from its
    // absence (a missing field) is not reported.
    let mut unusable = false;
    while mistakes.len() < MOST {
        let e = match toml::from_str::<T>(&text) {
            Ok(raw) => return Deserialized { raw: (!unusable).then_some(raw), text, mistakes },
            Err(e) => e,
        };
        let message = e.message().trim_end().replace('\n', ": ");
        let unknown = message.starts_with("unknown field");
        if unusable && !unknown {
            break;
        }
        unusable |= !unknown;
        mistakes.push((e.span(), message));
        match e.span().and_then(|at| entry_of(&text, &at)) {
            Some(entry) => blank(&mut text, entry),
            None => break,
        }
    }
    Deserialized { raw: None, text, mistakes }
}

/// The text of the key-value whose key or value is at `at`: from the key (or the start of its
/// line, for a table header or a dotted key) to the end of its value, with a comma that follows
/// it.
fn entry_of(text: &str, at: &Range<usize>) -> Option<Range<usize>> {
    let document = DeTable::parse(text).ok()?;
    let (key, end) = find(document.get_ref(), at)?;
    let key = &key;
    let line_start = text[..key.start].rfind('\n').map_or(0, |i| i + 1);
    let before = text[line_start..key.start].trim();
    // `[vip.prox]`, `[[vip.backend]]`, or `proxy.timeuts.connect = ...`: the whole line.
    let start = if before.starts_with('[') || before.ends_with('.') { line_start } else { key.start };
    // In an inline table, one of the commas around the key-value goes with it.
    let rest = &text[end..];
    let spaces = rest.len() - rest.trim_start_matches([' ', '\t']).len();
    if rest[spaces..].starts_with(',') {
        return Some(start..end + spaces + 1);
    }
    let head = text[line_start..start].trim_end_matches([' ', '\t']);
    match head.ends_with(',') {
        true => Some(line_start + head.len() - 1..end),
        false => Some(start..end),
    }
}

/// The key whose key or value is at `at`, and where its value ends, searching `table` at any
/// depth.
fn find(table: &DeTable<'_>, at: &Range<usize>) -> Option<(Range<usize>, usize)> {
    for (k, v) in table {
        if k.span() == *at || v.span() == *at {
            return Some((k.span(), end_of(v)));
        }
        if let Some(found) = find_in(v, at) {
            return Some(found);
        }
    }
    None
}

fn find_in(value: &Spanned<DeValue<'_>>, at: &Range<usize>) -> Option<(Range<usize>, usize)> {
    match value.get_ref() {
        DeValue::Table(t) => find(t, at),
        DeValue::Array(a) => a.iter().find_map(|v| find_in(v, at)),
        _ => None,
    }
}

/// The end of a value, its keys and values included (a table written with a header has its
/// keys after the header's own span).
fn end_of(value: &Spanned<DeValue<'_>>) -> usize {
    let inner = match value.get_ref() {
        DeValue::Table(t) => t.iter().map(|(k, v)| k.span().end.max(end_of(v))).max(),
        DeValue::Array(a) => a.iter().map(end_of).max(),
        _ => None,
    };
    inner.unwrap_or(0).max(value.span().end)
}

/// Replaces `range` of `text` with spaces, keeping its newlines.
fn blank(text: &mut String, range: Range<usize>) {
    // Byte by byte, so every later offset stays put (a multi-byte character becomes spaces).
    let blanked: String = text.as_bytes()[range.clone()].iter().map(|&b| if b == b'\n' { '\n' } else { ' ' }).collect();
    text.replace_range(range, &blanked);
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // only deserialized
    struct Outer {
        a: Option<i64>,
        inner: Option<Inner>,
        #[serde(default)]
        list: Vec<Inner>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // only deserialized
    struct Inner {
        x: Option<i64>,
    }

    fn lines(text: &str) -> Vec<(usize, String)> {
        let d = deserialize::<Outer>(text);
        assert_eq!(d.text.len(), text.len());
        assert_eq!(d.text.lines().count(), text.lines().count());
        d.mistakes.into_iter().map(|(span, m)| (text[..span.unwrap().start].matches('\n').count() + 1, m)).collect()
    }

    #[test]
    fn every_unknown_key_is_reported_at_every_depth() {
        let text =
            "b = 1\na = 2\ninner = { y = 1, x = 2, z = 3 }\n[[list]]\nw = 'é'\n[[list]]\nx = 1\n[inner2]\nq = 1\n";
        let found = lines(text);
        let keys: Vec<(usize, &str)> =
            found.iter().map(|(l, m)| (*l, m.split('`').nth(1).unwrap_or_default())).collect();
        assert_eq!(keys, [(1, "b"), (3, "y"), (3, "z"), (5, "w"), (8, "inner2")], "{found:?}");
        assert!(found[1].1.contains("expected `x`"), "{found:?}");
    }

    #[test]
    fn a_mistake_of_another_kind_does_not_hide_unknown_keys() {
        let d = deserialize::<Outer>("b = 1\na = 'two'\nc = 3\n");
        assert!(d.raw.is_none());
        assert_eq!(d.mistakes.len(), 3, "{:?}", d.mistakes);
        assert!(d.mistakes[1].1.contains("invalid type"), "{:?}", d.mistakes);
        assert!(d.mistakes[2].1.starts_with("unknown field `c`"), "{:?}", d.mistakes);
    }

    #[test]
    fn dotted_keys_are_blanked_whole() {
        let found = lines("inner.y = 1\na = 1\n");
        assert_eq!(found.len(), 1, "{found:?}");
        let d = deserialize::<Outer>("inner.y = 1\na = 1\n");
        assert_eq!(d.raw.map(|r| r.a), Some(Some(1)));
    }
}
