//! A backend's health check from lb.toml: the VIP's `health` table with the backend's overrides.
use std::net::SocketAddr;
use std::time::Duration;

use toml::Spanned;

use super::checker::{Checker, parse_duration};
use super::raw::RawHealth;
use super::{CheckKind, HealthKind, HealthSpec, health_defaults};

/// The check made of `layers` (the VIP's table, then the backend's overrides), key by key.
pub(super) fn health(c: &mut Checker<'_>, at: &str, layers: &[&Spanned<RawHealth>]) -> Option<HealthSpec> {
    if layers.is_empty() {
        return None;
    }
    // The last layer that sets a key wins.
    macro_rules! pick {
        ($field:ident) => {
            layers.iter().rev().find_map(|l| l.get_ref().$field.as_ref())
        };
    }
    let kind = pick!(kind).map(|k| *k.get_ref()).unwrap_or(HealthKind::Tcp);
    let at_line = layers.last().map(|l| l.span()).unwrap_or(0..0);
    let duration = |c: &mut Checker<'_>, s: Option<&Spanned<String>>, what: &str, default: Duration| match s {
        None => Some(default),
        Some(s) => match parse_duration(s.get_ref()) {
            Ok(d) if d.is_zero() => {
                c.error(s.span(), format!("{at}: health {what} must be more than zero"));
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                c.error(s.span(), format!("{at}: health {what} {:?}: {e}", s.get_ref()));
                None
            }
        },
    };
    let interval = duration(c, pick!(interval), "interval", health_defaults::INTERVAL);
    // An unset timeout is the default one, or the interval if that is shorter.
    let default_timeout = interval.map_or(health_defaults::TIMEOUT, |i| i.min(health_defaults::TIMEOUT));
    let timeout = duration(c, pick!(timeout), "timeout", default_timeout);
    if let (Some(i), Some(t)) = (interval, timeout)
        && t > i
    {
        let span = pick!(timeout).map(|s| s.span()).unwrap_or(at_line.clone());
        c.error(
            span,
            format!("{at}: health timeout ({}) must not exceed interval ({})", fmt_duration(t), fmt_duration(i)),
        );
    }
    let count = |c: &mut Checker<'_>, s: Option<&Spanned<i64>>, what: &str, default: u32| match s {
        None => Some(default),
        Some(s) => c.int(s, 1..=100, &format!("{at}: health {what}")).map(|v| v as u32),
    };
    let rise = count(c, pick!(rise), "rise", health_defaults::RISE);
    let fall = count(c, pick!(fall), "fall", health_defaults::FALL);
    let address = pick!(address).and_then(|s| match s.get_ref().parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            c.error(s.span(), format!("{at}: health address must be ADDR:PORT, got {:?}", s.get_ref()));
            None
        }
    });
    let path = pick!(path);
    let status = pick!(status);
    let check = match kind {
        HealthKind::None => return None,
        HealthKind::Tcp => {
            for s in [path.map(|p| p.span()), status.map(|s| s.span())].into_iter().flatten() {
                c.error(s, format!("{at}: health path and status only apply to kind = \"http\""));
            }
            CheckKind::Tcp
        }
        HealthKind::Http => {
            let p = path.map(|p| p.get_ref().clone()).unwrap_or_else(|| health_defaults::HTTP_PATH.into());
            if let Some(s) = path
                && (!p.starts_with('/') || p.chars().any(|ch| ch.is_whitespace() || ch.is_control()))
            {
                c.error(s.span(), format!("{at}: health path must start with '/' and contain no spaces, got {p:?}"));
            }
            let st = match status {
                Some(s) => c.int(s, 100..=599, &format!("{at}: health status")).map(|v| v as u16),
                None => Some(health_defaults::HTTP_STATUS),
            };
            CheckKind::Http { path: p, status: st.unwrap_or(health_defaults::HTTP_STATUS) }
        }
    };
    Some(HealthSpec { check, address, interval: interval?, timeout: timeout?, rise: rise?, fall: fall? })
}

pub(super) fn fmt_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}
