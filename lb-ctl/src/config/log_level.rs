//! `log_level` (`[daemon]`, `[defaults]`) and `--log-level`: one check for both.
//!
//! tracing's filter syntax takes any bare word as a module name: `verbose` or `inf` parse as
//! "everything of module `verbose` at trace", which leaves every line of the daemon's own
//! modules off. A bare word must therefore be a level; modules take a level with `=`.

/// The levels a filter (or a module in it) may name.
pub const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// `text` as a log filter, or why it is not one (in words that list the levels).
pub fn check(text: &str) -> Result<String, String> {
    let hint =
        || format!("write one of {}, or per module with a fallback level, e.g. lb_ctl=debug,warn", LEVELS.join(", "));
    if text.trim().is_empty() {
        return Err(format!("an empty log level: {}", hint()));
    }
    for directive in text.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level = match directive.rsplit_once('=') {
            Some((_, level)) => level,
            None => directive,
        };
        if !is_level(level) {
            return Err(match directive.contains('=') {
                true => format!("{level:?} in {directive:?} is not a log level: {}", hint()),
                false => format!("{directive:?} is not a log level: {}", hint()),
            });
        }
    }
    tracing_subscriber::EnvFilter::try_new(text).map(|_| text.to_string()).map_err(|e| format!("{e}: {}", hint()))
}

/// Whether `word` names a level (any case, as tracing reads them).
fn is_level(word: &str) -> bool {
    LEVELS.iter().any(|l| l.eq_ignore_ascii_case(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelt_levels_are_refused_with_the_list() {
        for bad in ["verbose", "inf", "lb_ctl=loud", "info,verbose", "lb_ctl", ""] {
            let e = check(bad).expect_err(bad);
            assert!(e.contains("off, error, warn, info, debug, trace"), "{bad}: {e}");
        }
        for good in ["info", "WARN", "lb_ctl=debug,warn", "lb_ctl::proxy=trace", "off"] {
            assert_eq!(check(good).as_deref(), Ok(good));
        }
    }
}
