//! Where a key is written: its span in the file, by its path (`vip[2].proxy.limits.max_connections`),
//! for checks made on values that were deserialized without spans (the `[vip.proxy]` options
//! are lb-proxy's types, merged with `[defaults.proxy]`).
use std::ops::Range;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// One step of a path: a key of a table, or an element of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The span of the key at the end of `path` in `text` (of the element, when `path` ends with
/// an index); None when it is not written there.
pub(super) fn key_span(text: &str, path: &[Step<'_>]) -> Option<Range<usize>> {
    let document = DeTable::parse(text).ok()?;
    let (first, rest) = path.split_first()?;
    let Step::Key(name) = first else { return None };
    let (key, value) = entry(document.get_ref(), name)?;
    walk(key, value, rest)
}

fn entry<'t, 'i>(table: &'t DeTable<'i>, name: &str) -> Option<(Range<usize>, &'t Spanned<DeValue<'i>>)> {
    table.iter().find(|(k, _)| k.get_ref() == name).map(|(k, v)| (k.span(), v))
}

fn walk(here: Range<usize>, value: &Spanned<DeValue<'_>>, path: &[Step<'_>]) -> Option<Range<usize>> {
    let Some((step, rest)) = path.split_first() else { return Some(here) };
    match (step, value.get_ref()) {
        (Step::Key(name), DeValue::Table(t)) => {
            let (key, value) = entry(t, name)?;
            walk(key, value, rest)
        }
        (Step::Index(i), DeValue::Array(a)) => {
            let element = a.get(*i)?;
            walk(element.span(), element, rest)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str, path: &[Step<'_>]) -> Option<usize> {
        key_span(text, path).map(|s| text[..s.start].matches('\n').count() + 1)
    }

    #[test]
    fn keys_are_found_under_headers_inline_tables_and_arrays_of_tables() {
        let text = "[defaults.proxy]\nmax_connections = 1\n[[vip]]\nport = 1\n[[vip]]\nport = 2\n[vip.proxy.limits]\nmax_header_bytes = 0\n[[vip.proxy.tls.certificates]]\nchain = 'a'\nkey = 'b'\n";
        use Step::{Index, Key};
        assert_eq!(line(text, &[Key("defaults"), Key("proxy"), Key("max_connections")]), Some(2));
        assert_eq!(line(text, &[Key("vip"), Index(1), Key("proxy"), Key("limits"), Key("max_header_bytes")]), Some(8));
        let key = [Key("vip"), Index(1), Key("proxy"), Key("tls"), Key("certificates"), Index(0), Key("key")];
        assert_eq!(line(text, &key), Some(11));
        assert_eq!(line(text, &[Key("vip"), Index(0), Key("proxy")]), None);
    }
}
