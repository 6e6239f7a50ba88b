//! Serde for durations: `"2s"`, `"150ms"`, `"1m"`, `"1h"`, or an integer number of
//! milliseconds.
use std::time::Duration;

use serde::{Deserialize, Deserializer, de::Error};

#[derive(Deserialize)]
#[serde(untagged)]
enum Raw {
    Millis(u64),
    Text(String),
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    match Raw::deserialize(d)? {
        Raw::Millis(ms) => Ok(Duration::from_millis(ms)),
        Raw::Text(s) => parse(&s).ok_or_else(|| {
            D::Error::custom(format!("invalid duration {s:?}: expected e.g. \"2s\", \"150ms\", \"1m\", \"1h\""))
        }),
    }
}

/// A duration that must be more than zero: a timeout of 0 would end every wait at once, where
/// an operator used to other proxies may mean "no timeout" (there is none here).
pub mod nonzero {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let t = super::deserialize(d)?;
        if t.is_zero() {
            return Err(D::Error::custom("a timeout of 0 would end every wait at once: give a time above 0"));
        }
        Ok(t)
    }
}

pub fn parse(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    match unit.trim() {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
        "h" => Some(Duration::from_secs(n.checked_mul(3600)?)),
        _ => None,
    }
}
