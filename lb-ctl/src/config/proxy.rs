//! `[vip.proxy]` (over `[defaults.proxy]`): the checks lb-proxy's own types cannot make with
//! lines, each mistake at the line of the key that holds it (the VIP's own table, else the
//! defaults'): settings that would break serving, and the TLS files, each file on its own.
use std::ops::Range;
use std::path::Path;

use lb_proxy::{ProxyOptions, TlsTermination};

use super::Protocol;
use super::checker::Checker;
use super::defaults::Defaults;
use super::raw::RawVip;
use super::spans::{Step, key_span};

/// A proxy VIP's options (`[defaults.proxy]` under its own), with relative TLS file paths
/// taken under the configuration file's directory, and those files loaded once to check them.
pub(super) fn options(
    c: &mut Checker<'_>,
    at: &str,
    v: &RawVip,
    defaults: &Defaults<'_>,
    index: usize,
    protocol: Protocol,
) -> Option<ProxyOptions> {
    let dir = Path::new(&c.file).parent().unwrap_or(Path::new("."));
    let options = defaults.proxy_options(index)?.files_relative_to(dir);
    let table = v.proxy.as_ref().map_or(v.address.span(), |p| p.span());
    let place = Place { index, table };
    for (key, message) in zeros(&options) {
        let span = place.of(c.text, key);
        c.error(span, format!("{at}: {message}"));
    }
    for (key, message) in out_of_range(&options) {
        let span = place.of(c.text, key);
        c.error(span, format!("{at}: {message}"));
    }
    for (key, message) in tls_mistakes(&options) {
        let span = place.of(c.text, &key);
        c.error(span, format!("{at}: {message}"));
    }
    for mistake in options.mistakes(protocol.proxy_mode()) {
        c.error(place.table.clone(), format!("{at}: {mistake}"));
    }
    Some(options)
}

/// Where a VIP's proxy keys are written.
struct Place {
    /// The VIP's index among `[[vip]]`.
    index: usize,
    /// Its `[vip.proxy]` table (its address when it has none): where a key neither it nor
    /// `[defaults.proxy]` writes is reported.
    table: Range<usize>,
}

impl Place {
    /// The span of `key` (its steps after `proxy`) in the VIP's table, else in the defaults'.
    fn of(&self, text: &str, key: &[Step<'_>]) -> Range<usize> {
        let own: Vec<Step<'_>> = [Step::Key("vip"), Step::Index(self.index), Step::Key("proxy")]
            .into_iter()
            .chain(key.iter().copied())
            .collect();
        let defaults: Vec<Step<'_>> =
            [Step::Key("defaults"), Step::Key("proxy")].into_iter().chain(key.iter().copied()).collect();
        key_span(text, &own).or_else(|| key_span(text, &defaults)).unwrap_or(self.table.clone())
    }
}

/// Values that leave the VIP serving nothing: zeros where at least one is needed.
fn zeros(o: &ProxyOptions) -> Vec<(&'static [Step<'static>], String)> {
    use Step::Key;
    let defaults = lb_proxy::Limits::default();
    let mut found = Vec::new();
    if o.max_connections == Some(0) {
        found.push((
            &[Key("max_connections")][..],
            "max_connections = 0 lets no request reach a backend (each waits, then gets 503): give at least 1, or leave it out for no limit".to_string(),
        ));
    }
    let limits: [(&'static [Step<'static>], usize, usize, &str); 5] = [
        (
            &[Key("limits"), Key("max_connections")],
            o.limits.max_connections,
            defaults.max_connections,
            "refuses every client connection",
        ),
        (
            &[Key("limits"), Key("max_header_bytes")],
            o.limits.max_header_bytes,
            defaults.max_header_bytes,
            "answers every request 431 (no request head fits in 0 bytes)",
        ),
        (
            &[Key("limits"), Key("max_headers")],
            o.limits.max_headers,
            defaults.max_headers,
            "answers every request 431 (every request has a Host header)",
        ),
        (
            &[Key("limits"), Key("max_request_line")],
            o.limits.max_request_line,
            defaults.max_request_line,
            "answers every request 414",
        ),
        (
            &[Key("limits"), Key("h2_max_streams")],
            o.limits.h2_max_streams as usize,
            defaults.h2_max_streams as usize,
            "lets no HTTP/2 client send a request",
        ),
    ];
    for (key, value, default, what) in limits {
        if value == 0 {
            let name = key
                .iter()
                .map(|s| match s {
                    Key(k) => *k,
                    Step::Index(_) => "",
                })
                .collect::<Vec<_>>()
                .join(".");
            found.push((key, format!("{name} = 0 {what}: give at least 1 (default {default})")));
        }
    }
    found
}

/// Values outside what the protocol allows.
fn out_of_range(o: &ProxyOptions) -> Vec<(&'static [Step<'static>], String)> {
    use Step::Key;
    let window = o.limits.h2_window_bytes;
    if lb_proxy::H2_WINDOW_BYTES.contains(&window) {
        return Vec::new();
    }
    let (low, high) = (lb_proxy::H2_WINDOW_BYTES.start(), lb_proxy::H2_WINDOW_BYTES.end());
    let default = lb_proxy::Limits::default().h2_window_bytes;
    vec![(
        &[Key("limits"), Key("h2_window_bytes")][..],
        format!(
            "limits.h2_window_bytes = {window} is outside what HTTP/2 allows: give {low} to {high} (default {default})"
        ),
    )]
}

/// Each TLS file checked on its own (so every bad file is reported, each at its key), with
/// the path of the key that names it.
fn tls_mistakes(o: &ProxyOptions) -> Vec<(Vec<Step<'static>>, String)> {
    use Step::{Index, Key};
    let mut found = Vec::new();
    if let Some(t) = &o.tls {
        let single = |certificates| ProxyOptions {
            tls: Some(TlsTermination { certificates, ..t.clone() }),
            ..ProxyOptions::default()
        };
        // One check per certificate; settings of the whole table (min_version, alpn) once.
        let each: Vec<(Option<usize>, ProxyOptions)> = match t.certificates.is_empty() {
            true => vec![(None, single(Vec::new()))],
            false => t.certificates.iter().enumerate().map(|(i, f)| (Some(i), single(vec![f.clone()]))).collect(),
        };
        for (i, options) in each {
            let Err(e) = lb_proxy::check_tls_files(&options) else { continue };
            let key = match (e.split_whitespace().next().unwrap_or(""), i) {
                ("certificate", Some(i)) => vec![Key("tls"), Key("certificates"), Index(i), Key("chain")],
                ("private", Some(i)) => vec![Key("tls"), Key("certificates"), Index(i), Key("key")],
                ("tls.min_version", _) => vec![Key("tls"), Key("min_version")],
                ("tls.alpn", _) => vec![Key("tls"), Key("alpn")],
                ("tls.certificates", _) => vec![Key("tls"), Key("certificates")],
                _ => vec![Key("tls")],
            };
            if !found.contains(&(key.clone(), e.clone())) {
                found.push((key, e));
            }
        }
    }
    if let Some(b) = &o.backend_tls {
        let options = ProxyOptions { backend_tls: Some(b.clone()), ..ProxyOptions::default() };
        if let Err(e) = lb_proxy::check_tls_files(&options) {
            let key = match e.starts_with("backend_tls.server_name") {
                true => vec![Key("backend_tls"), Key("server_name")],
                false => vec![Key("backend_tls"), Key("ca_file")],
            };
            found.push((key, e));
        }
    }
    found
}
