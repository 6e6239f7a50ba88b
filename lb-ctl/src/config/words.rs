//! The parser's messages (serde's, toml's) said in the terms of the file: the key as written,
//! the value as written, and what to write instead. `expected i64` becomes "a whole number".

/// `n` and its noun, singular for one: "1 VIP", "2 VIPs", "1 successful check".
pub fn counted(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `message` (serde's or toml's) about the value of `key` (when known) as the user wrote it.
pub(crate) fn in_user_terms(message: &str, key: Option<&str>) -> String {
    let key = key.unwrap_or("this value");
    if let Some(rest) = message.strip_prefix("invalid type: ")
        && let Some((found, expected)) = rest.split_once(", expected ")
    {
        return format!("{key}: {} is written here, but {} is expected", found_words(found), expected_words(expected));
    }
    if let Some(rest) = message.strip_prefix("invalid value: ")
        && let Some((found, expected)) = rest.split_once(", expected ")
    {
        return format!("{key}: {} is out of range: {} is expected", found_words(found), expected_words(expected));
    }
    if let Some(rest) = message.strip_prefix("unknown variant ") {
        let (written, choices) = rest.split_once(", expected ").unwrap_or((rest, ""));
        let written = written.trim_matches('`');
        let choices = variants(choices);
        let list = choices.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join(", ");
        let mut out = format!("{key} = {written:?} is not one of {list}");
        if let Some(near) = closest(written, &choices) {
            out.push_str(&format!(" (did you mean {near:?}?)"));
        }
        return out;
    }
    if message.starts_with("duplicate key") {
        return format!("`{key}` is written twice in this table: keep one");
    }
    if let Some(rest) = message.strip_prefix("missing field ") {
        return format!("missing key {rest}: this table needs it");
    }
    message.to_string()
}

/// The choices in `one of `a`, `b`` or `` `a` or `b` ``.
pub(super) fn variants(expected: &str) -> Vec<String> {
    expected.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// The choice closest to `written` in spelling, when it is close.
pub(super) fn closest<'c>(written: &str, choices: &'c [String]) -> Option<&'c str> {
    choices
        .iter()
        .map(|c| (distance(&written.to_ascii_lowercase(), c), c))
        .filter(|(d, c)| *d <= (c.len() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.as_str())
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

/// serde's `string "80"`, `integer `5``, `sequence`, ... as the file writes them.
fn found_words(found: &str) -> String {
    let (kind, value) = found.split_once(' ').unwrap_or((found, ""));
    let value = value.trim_matches('`');
    match kind {
        "string" => format!("the text {value} (in quotes)"),
        "integer" => format!("the number {value}"),
        "floating" => format!("the number {}", value.trim_start_matches("point ").trim_matches('`')),
        "boolean" => format!("{value} (true/false)"),
        "sequence" => "a list [...]".into(),
        "map" => "a table".into(),
        _ => found.to_string(),
    }
}

/// serde's `i64`, `a boolean`, `struct RawHealth`, ... in words.
fn expected_words(expected: &str) -> String {
    let e = expected.trim();
    match e {
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number (no quotes)".into(),
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number of 0 or more (no quotes)".into(),
        "a boolean" | "bool" => "true or false (no quotes)".into(),
        "a string" | "string" | "a borrowed string" => "text in quotes".into(),
        "a sequence" => "a list [...]".into(),
        _ if e.starts_with("struct ") || e == "a map" => "a table (key = value lines, or { ... })".into(),
        _ if e.starts_with("a nonzero") => "a whole number of 1 or more (no quotes)".into(),
        _ if e.contains('`') => {
            format!("one of {}", variants(e).iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join(", "))
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parser_words_become_the_files_words() {
        assert_eq!(
            in_user_terms("invalid type: string \"eighty\", expected i64", Some("port")),
            "port: the text \"eighty\" (in quotes) is written here, but a whole number (no quotes) is expected"
        );
        assert_eq!(
            in_user_terms(
                "unknown variant `dsr-ipipp`, expected one of `nat`, `dsr-ipip`, `dsr-l2`",
                Some("forwarding")
            ),
            "forwarding = \"dsr-ipipp\" is not one of \"nat\", \"dsr-ipip\", \"dsr-l2\" (did you mean \"dsr-ipip\"?)"
        );
        assert_eq!(in_user_terms("missing field `port`", None), "missing key `port`: this table needs it");
        assert_eq!((counted(1u32, "VIP", "VIPs"), counted(0u32, "VIP", "VIPs")), ("1 VIP".into(), "0 VIPs".into()));
    }
}
