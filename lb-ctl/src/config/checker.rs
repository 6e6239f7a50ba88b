//! What every check of the file reports through: the `Checker` that ties each mistake to its
//! line, and the duration syntax. Below `validate` and the section checks it calls
//! (`cluster`, `health`).
use std::net::IpAddr;
use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::Problem;
use super::hosts::Resolver;

/// Parses a duration such as `2s`, `500ms` or `1m 30s`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (write e.g. \"2s\" or \"500ms\")"))
}

pub(super) struct Checker<'a> {
    pub(super) file: String,
    pub(super) text: &'a str,
    pub(super) resolve: &'a Resolver,
    pub(super) problems: Vec<Problem>,
    /// What is allowed but probably not meant.
    pub(super) warnings: Vec<Problem>,
    /// Values that stand in for wrong ones (see `unknown.rs`): their mistake is said already.
    pub(super) stand_ins: Vec<Range<usize>>,
}

impl Checker<'_> {
    pub(super) fn line_of(&self, span: Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text[..end].bytes().filter(|b| *b == b'\n').count() + 1
    }

    pub(super) fn warn(&mut self, span: Range<usize>, message: impl Into<String>) {
        let line = Some(self.line_of(span));
        self.warnings.push(Problem { file: self.file.clone(), line, message: format!("warning: {}", message.into()) });
    }

    pub(super) fn error(&mut self, span: Range<usize>, message: impl Into<String>) {
        if self.stand_ins.iter().any(|s| s.contains(&span.start)) {
            return;
        }
        let line = Some(self.line_of(span));
        self.problems.push(Problem { file: self.file.clone(), line, message: message.into() });
    }

    /// An integer in `range`, or a problem saying `what` must be in it.
    pub(super) fn int(
        &mut self,
        value: &Spanned<i64>,
        range: std::ops::RangeInclusive<i64>,
        what: &str,
    ) -> Option<i64> {
        let v = *value.get_ref();
        if range.contains(&v) {
            Some(v)
        } else {
            self.error(value.span(), format!("{what} must be {}-{}, got {v}", range.start(), range.end()));
            None
        }
    }

    pub(super) fn ip(&mut self, value: &Spanned<String>, what: &str) -> Option<IpAddr> {
        match value.get_ref().parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                self.error(value.span(), format!("{what} {:?} is not an IP address", value.get_ref()));
                None
            }
        }
    }
}
