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

use super::words;

/// At most this many unknown keys are reported (and passes made).
const MOST: usize = 200;

/// What deserializing `T` from a file found.
pub(super) struct Deserialized<T> {
    /// The file's contents; None when a mistake other than an unknown key or a wrong value
    /// stopped it.
    pub raw: Option<T>,
    /// The text with every unknown key blanked out and every wrong value replaced by one of
    /// the right type: what later checks read (same lines).
    pub text: String,
    /// Each mistake with the span it names, when it names one.
    pub mistakes: Vec<(Option<Range<usize>>, String)>,
    /// Where `text` holds a stand-in for a wrong value: checks of those values report
    /// nothing more (the mistake is said once, in the user's words).
    pub stand_ins: Vec<Range<usize>>,
}

/// Deserializes `text`, reporting every unknown key and every value of the wrong type (see the
/// module's documentation). Mistakes are in the file's order.
pub(super) fn deserialize<T: DeserializeOwned>(text: &str) -> Deserialized<T> {
    let mut found = passes::<T>(text);
    found.mistakes.sort_by_key(|(span, _)| span.as_ref().map_or(usize::MAX, |s| s.start));
    found
}

fn passes<T: DeserializeOwned>(text: &str) -> Deserialized<T> {
    let mut found = Deserialized { raw: None, text: text.to_string(), mistakes: Vec::new(), stand_ins: Vec::new() };
    // After a mistake that leaves nothing to stand in (a missing key, say) the file cannot be
    // used, but the search for unknown keys goes on; what follows from it is not reported.
    let mut unusable = false;
    // Keys taken out of the file: a later "missing field" of the same name is their echo.
    let mut taken_out: Vec<String> = Vec::new();
    while found.mistakes.len() < MOST {
        let e = match toml::from_str::<T>(&found.text) {
            Ok(raw) => {
                found.raw = (!unusable).then_some(raw);
                return found;
            }
            Err(e) => e,
        };
        let message = e.message().trim_end().replace('\n', ": ");
        let unknown = message.starts_with("unknown field");
        let echo = taken_out.iter().any(|k| message == format!("missing field `{k}`"));
        if unusable && !unknown {
            break;
        }
        let Some(at) = e.span() else {
            found.mistakes.push((None, words::in_user_terms(&message, None)));
            break;
        };
        // A duplicate key leaves no document to look it up in: its span is the key itself.
        let key = match message.starts_with("duplicate key") {
            true => found.text.get(at.clone()).map(|k| k.trim_matches(['"', '\'']).to_string()),
            false => key_at(&found.text, &at),
        };
        if unknown {
            found.mistakes.push((Some(at.clone()), message.clone()));
        } else if !echo {
            found.mistakes.push((Some(at.clone()), words::in_user_terms(&message, key.as_deref())));
        }
        if !unknown && let Some(value) = stand_in(&message) {
            replace(&mut found, at, &value);
            continue;
        }
        match entry_of(&found.text, &at) {
            Some(entry) if !echo => {
                unusable |= !unknown;
                taken_out.extend(key);
                blank(&mut found.text, entry)
            }
            _ => {
                unusable = true;
                if !unknown {
                    break;
                }
            }
        }
    }
    found.raw = None;
    found
}

/// A value of the type `message` says was expected, to stand in for the wrong one so the rest
/// of the file is checked: None when the type is not known from the message.
fn stand_in(message: &str) -> Option<String> {
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let (written, expected) = rest.split_once(", expected ")?;
        let choices = words::variants(expected);
        let pick = words::closest(written.trim_matches('`'), &choices).or(choices.first().map(String::as_str))?;
        return Some(format!("{pick:?}"));
    }
    let expected = message.strip_prefix("invalid type: ")?.split_once(", expected ")?.1.trim();
    Some(
        match expected {
            "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "usize" | "isize" => "1",
            "a boolean" => "false",
            "a string" | "string" | "a borrowed string" => "\"\"",
            "a sequence" => "[]",
            _ if expected.starts_with("struct ") || expected == "a map" => "{}",
            _ if expected.starts_with("a nonzero") => "1",
            _ => return None,
        }
        .to_string(),
    )
}

/// Puts `value` in place of the text at `at`, keeping its newlines (so lines stay) and moving
/// the spans found so far that lie after it.
fn replace<T>(found: &mut Deserialized<T>, at: Range<usize>, value: &str) {
    let newlines = found.text[at.clone()].matches('\n').count();
    let mut with = format!("{value}{}", "\n".repeat(newlines));
    while with.len() < at.len() {
        with.insert(value.len(), ' ');
    }
    let moved = |r: &mut Range<usize>| {
        if r.start >= at.end {
            *r = r.start + with.len() - at.len()..r.end + with.len() - at.len();
        }
    };
    found.mistakes.iter_mut().filter_map(|(s, _)| s.as_mut()).for_each(moved);
    found.stand_ins.iter_mut().for_each(moved);
    found.text.replace_range(at.clone(), &with);
    found.stand_ins.push(at.start..at.start + value.len());
}

/// The name of the key whose key or value is at `at`, as written.
fn key_at(text: &str, at: &Range<usize>) -> Option<String> {
    let document = DeTable::parse(text).ok()?;
    let (key, _) = find(document.get_ref(), at)?;
    Some(text[key].trim_matches(['"', '\'']).to_string())
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
        // A number stands in for 'two': the rest is read, and checks of `a` say nothing more.
        assert!(d.raw.is_some());
        assert_eq!(d.stand_ins.len(), 1);
        assert_eq!(d.mistakes.len(), 3, "{:?}", d.mistakes);
        assert!(d.mistakes[1].1.starts_with("a: the text \"two\""), "{:?}", d.mistakes);
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
