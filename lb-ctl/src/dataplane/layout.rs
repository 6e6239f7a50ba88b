//! What a start of this build does with the maps it finds pinned: reuse, migrate or refuse,
//! decided map by map from one table ([`layouts`]).
//!
//! Each pin directory holds a version record, the small pinned map [`HEADER`]: map name →
//! the layout version (`lb_common::layout::LAYOUT_VERSION`) of the build that made or last
//! migrated it. A map of this build that is
//! - not pinned (new in this build, or a first start) is created;
//! - pinned in a version at or after the one that last changed its layout (`since`) is reused
//!   as it is (the connection table keeps every flow);
//! - pinned in an older version that one of its [`Migration`]s converts is migrated: created
//!   anew and filled from the old one (`dataplane::migrate`);
//! - pinned in a newer version (a downgrade) or one it has no conversion for is refused,
//!   saying which versions this build migrates from.
//!
//! Pins without a record were made before versions were recorded, by builds with this build's
//! layouts: they are reused when every size matches, refused otherwise.
use std::collections::HashMap;
use std::mem::size_of;
use std::path::Path;

use aya::maps::{Map, MapData, MapInfo};
use lb_common::backend::Backend;
use lb_common::config::DataplaneConfig;
use lb_common::flow::{ForwardSet, ReverseSet, flow_sets};
use lb_common::layout::LAYOUT_VERSION;
use lb_common::limits::{MAX_BACKENDS, MAX_VIPS, PORTS};
use lb_common::map_names;
use lb_common::stats::{Counter, Traffic};
use lb_common::vip::{VipInfo, VipKey};

use super::{Result, err};

/// The version record's pin name inside a pin directory.
pub const HEADER: &str = "LAYOUT";
/// A map name as the version record keys it (NUL-padded).
type NameKey = [u8; 16];

/// Rewrites one value (one CPU's, for per-CPU maps) of an older layout in place.
pub type Convert = fn(&mut [u8]);
/// One map to migrate: its name, the version it is in, and its conversion.
pub type Move = (&'static str, u32, Convert);

/// A conversion of one older layout of a map into this build's.
#[derive(Clone, Copy)]
pub struct Migration {
    /// The layout version converted from.
    pub from: u32,
    /// What changed, for `upgrade-check` and the log.
    pub what: &'static str,
    /// Rewrites one value in place; keys are kept.
    pub convert: Convert,
}

/// This build's layout of one pinned map.
#[derive(Clone, Copy)]
pub struct MapLayout {
    pub name: &'static str,
    pub key_size: usize,
    pub value_size: usize,
    /// Entries where this build or the configuration fixes them.
    pub entries: Option<u32>,
    /// The layout version that last changed this map.
    pub since: u32,
    /// The older layouts this build converts.
    pub migrations: &'static [Migration],
}

/// Version 1 → 2 of FLOWS: `FlowEntry` had `vip_id` before `backend_id`. Each way is
/// `FlowKey` (40 bytes), `FlowEntry` (16), `used`, `check`: swap the entry's first two words.
/// The check word is computed from the fields, not their order, so it still holds.
fn flows_v1(value: &mut [u8]) {
    const WAY: usize = size_of::<ForwardSet>() / lb_common::flow::FLOW_WAYS;
    for way in value.chunks_exact_mut(WAY) {
        let (vip_id, backend_id) = way[40..48].split_at_mut(4);
        vip_id.swap_with_slice(backend_id);
    }
}

/// Version 1 → 2 of VIPS and VIP_INFO: `VipInfo` had `forwarding, hash, _pad` before `id`.
fn vip_info_v1(value: &mut [u8]) {
    value[..8].rotate_left(4);
}

const FLOWS_V1: &[Migration] =
    &[Migration { from: 1, what: "flow entries: backend id before VIP id", convert: flows_v1 }];
/// Versions 1 to 4 → 5 of COUNTERS: counters are only ever added after the others (the QUIC
/// counters in 3, `icmp_to_client` in 5), so every older counter keeps its index (and its
/// value); the new ones start at 0.
fn counters_appended(_value: &mut [u8]) {}

const COUNTERS_V1_V4: &[Migration] = &[
    Migration { from: 1, what: "counters: QUIC counters and icmp_to_client added", convert: counters_appended },
    Migration { from: 2, what: "counters: QUIC counters and icmp_to_client added", convert: counters_appended },
    Migration { from: 3, what: "counters: icmp_to_client added at the end", convert: counters_appended },
    Migration { from: 4, what: "counters: icmp_to_client added at the end", convert: counters_appended },
];
/// Versions 1 to 3 → 4 of CONFIG: `share_flows` (0 or 1) was a `u32`; its first byte is the
/// new `share_flows`, and the next one, always 0, reads as `table_hash::kind::CHAINED`: the
/// hash those builds made their tables with, which the tables keep.
fn config_hash_kind(_value: &mut [u8]) {}

const CONFIG_V1_V3: &[Migration] = &[
    Migration { from: 1, what: "config: the table hash's kind (the old hash kept)", convert: config_hash_kind },
    Migration { from: 2, what: "config: the table hash's kind (the old hash kept)", convert: config_hash_kind },
    Migration { from: 3, what: "config: the table hash's kind (the old hash kept)", convert: config_hash_kind },
];
const VIP_INFO_V1: &[Migration] = &[Migration { from: 1, what: "VIP info: id first", convert: vip_info_v1 }];

/// This build's layout of every pinned map. A map added to `PINNED_MAPS` gets a line here
/// (a test keeps them equal); a changed layout bumps `LAYOUT_VERSION`, sets `since` to it and
/// adds a conversion from the previous one.
pub fn layouts(ring_size: u32, flow_table_size: u32) -> [MapLayout; 13] {
    let layout = |name, key_size, value_size, entries, since: u32, migrations| MapLayout {
        name,
        key_size,
        value_size,
        entries,
        // The test-only previous build knows no later version than its own.
        since: since.min(LAYOUT_VERSION),
        migrations,
    };
    let flows = Some(flow_sets(flow_table_size));
    [
        layout(map_names::VIPS, size_of::<VipKey>(), size_of::<VipInfo>(), None, 2, VIP_INFO_V1),
        layout(map_names::VIP_INFO, 4, size_of::<VipInfo>(), None, 2, VIP_INFO_V1),
        layout(map_names::BACKENDS, 4, size_of::<Backend>(), None, 1, &[]),
        layout(map_names::NAT_BACKENDS, size_of::<VipKey>(), 4, None, 1, &[]),
        // New in version 3, unchanged since: no older build pinned another layout of it.
        layout(map_names::QUIC_SERVERS, size_of::<lb_common::quic::QuicServerKey>(), 4, None, 1, &[]),
        layout(map_names::RINGS, 4, 4, Some(MAX_VIPS * ring_size), 1, &[]),
        layout(map_names::FLOWS, 4, size_of::<ForwardSet>(), flows, 2, FLOWS_V1),
        layout(map_names::REVERSE_FLOWS, 4, size_of::<ReverseSet>(), flows, 1, &[]),
        layout(map_names::PORT_FLAGS, 4, 4, Some(PORTS), 1, &[]),
        layout(map_names::CONFIG, 4, size_of::<DataplaneConfig>(), Some(1), 4, CONFIG_V1_V3),
        // Counters and statistics too: a build with more counters would write past a pinned
        // map of fewer (silently lost), and read the others' figures in the wrong places.
        layout(map_names::COUNTERS, 4, size_of::<u64>(), Some(Counter::COUNT), 5, COUNTERS_V1_V4),
        layout(map_names::VIP_STATS, 4, size_of::<Traffic>(), Some(MAX_VIPS), 1, &[]),
        layout(map_names::BACKEND_STATS, 4, size_of::<Traffic>(), Some(MAX_BACKENDS), 1, &[]),
    ]
}

/// What a start does with one map.
#[derive(Clone, Copy, Debug)]
pub enum Action {
    /// Not pinned: created.
    Create,
    /// Pinned in this build's layout: reused as it is.
    Reuse,
    /// Pinned in layout version `from`: created anew and filled from the old one.
    Migrate { from: u32, what: &'static str, convert: Convert },
}

/// What a start of this build does with the pins of one directory.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub maps: Vec<(&'static str, Action)>,
    /// Layout versions recorded for the pinned maps (empty: no record).
    pub recorded: HashMap<String, u32>,
}

impl Plan {
    /// Whether any map was found pinned (the connection table is kept).
    pub fn found(&self) -> bool {
        self.maps.iter().any(|(_, a)| !matches!(a, Action::Create))
    }

    /// The maps to migrate, with what converts them.
    pub fn migrations(&self) -> Vec<Move> {
        self.maps
            .iter()
            .filter_map(|(name, a)| match a {
                Action::Migrate { from, convert, .. } => Some((*name, *from, *convert)),
                _ => None,
            })
            .collect()
    }
}

/// The versions this build migrates from, as the refusals say it.
pub fn migrates_from() -> String {
    let mut from: Vec<u32> = layouts(1, 1)
        .iter()
        .flat_map(|l| l.migrations.iter().map(|m| m.from))
        .filter(|v| *v < LAYOUT_VERSION)
        .collect();
    from.sort_unstable();
    from.dedup();
    match from.is_empty() {
        true => format!("this build has layout version {LAYOUT_VERSION} and migrates from no older one"),
        false => {
            let list: Vec<String> = from.iter().map(u32::to_string).collect();
            format!("this build has layout version {LAYOUT_VERSION} and migrates from version {}", list.join(", "))
        }
    }
}

/// Decides, map by map, what a start of this build does with the pins in `dir`; refuses pins
/// it cannot use (a newer layout, one it cannot convert, another ring or table size).
pub fn plan(dir: &Path, ring_size: u32, flow_table_size: u32) -> Result<Plan> {
    let recorded = read_header(dir)?;
    let mut plan = Plan { maps: Vec::new(), recorded: recorded.clone().unwrap_or_default() };
    for layout in layouts(ring_size, flow_table_size) {
        let path = dir.join(layout.name);
        if !path.exists() {
            plan.maps.push((layout.name, Action::Create));
            continue;
        }
        let info = MapInfo::from_pin(&path).map_err(|e| err(format!("{}: {e}", path.display())))?;
        let found = format!("{} entries of {}+{} bytes", info.max_entries(), info.key_size(), info.value_size());
        let sizes_match =
            info.key_size() as usize == layout.key_size && info.value_size() as usize == layout.value_size;
        let entries_match = layout.entries.is_none_or(|n| n == info.max_entries());
        let version = recorded.as_ref().and_then(|r| r.get(layout.name).copied());
        let action = match version {
            Some(v) if v > LAYOUT_VERSION => {
                return Err(err(format!(
                    "the maps pinned in {} are of another layout: {} was made by a newer lb-ctl \
                     (layout version {v}); {} (a downgrade is refused); start the newer lb-ctl again, \
                     or run `lb-ctl detach` first (this drops the connection table)",
                    dir.display(),
                    layout.name,
                    migrates_from()
                )));
            }
            Some(v) if v >= layout.since => Action::Reuse,
            Some(v) => match layout.migrations.iter().find(|m| m.from == v) {
                Some(m) => Action::Migrate { from: v, what: m.what, convert: m.convert },
                None => {
                    return Err(err(format!(
                        "the maps pinned in {} are of another layout: {} is in layout version {v}; {}; \
                         run `lb-ctl detach` first (this drops the connection table)",
                        dir.display(),
                        layout.name,
                        migrates_from()
                    )));
                }
            },
            // No record: made before versions were recorded, in this build's layouts.
            None => Action::Reuse,
        };
        // Conversions keep sizes (they rewrite values in place); ring and table sizes are the
        // configuration's, which an upgrade does not change. A migration may grow a map whose
        // entries this build fixes (more counters): the entries the old map lacks start at 0.
        let grows = matches!(action, Action::Migrate { .. }) && layout.entries.is_some_and(|n| info.max_entries() < n);
        if !sizes_match || !(entries_match || grows) {
            let version = version.map_or("no recorded version".to_string(), |v| format!("layout version {v}"));
            return Err(err(format!(
                "the maps pinned in {} are of another layout or were made with another \
                 ring_size/flow_table_size ({}: {found}, {version}; {}); keep the old settings, \
                 or run `lb-ctl detach` first (this drops the connection table)",
                dir.display(),
                layout.name,
                migrates_from()
            )));
        }
        plan.maps.push((layout.name, action));
    }
    Ok(plan)
}

fn name_key(name: &str) -> NameKey {
    let mut key = [0u8; 16];
    key[..name.len()].copy_from_slice(name.as_bytes());
    key
}

fn header_map(path: &Path) -> Result<aya::maps::HashMap<MapData, NameKey, u32>> {
    let data = MapData::from_pin(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
    aya::maps::HashMap::try_from(Map::HashMap(data)).map_err(|e| err(format!("{}: {e}", path.display())))
}

/// The versions recorded in `dir` (None: no record).
pub fn read_header(dir: &Path) -> Result<Option<HashMap<String, u32>>> {
    let path = dir.join(HEADER);
    if !path.exists() {
        return Ok(None);
    }
    let map = header_map(&path)?;
    let mut versions = HashMap::new();
    for entry in map.iter() {
        let (key, version) = entry.map_err(|e| err(format!("{}: {e}", path.display())))?;
        let name = String::from_utf8_lossy(&key).trim_end_matches('\0').to_string();
        versions.insert(name, version);
    }
    Ok(Some(versions))
}

/// Records this build's layout version for every pinned map of `dir` (made, reused as the
/// same layout, or migrated), creating the record if there is none.
pub fn write_header(dir: &Path) -> Result<()> {
    let path = dir.join(HEADER);
    if !path.exists() {
        let map = aya::maps::HashMap::<MapData, NameKey, u32>::create(64, 0)
            .map_err(|e| err(format!("creating the layout record: {e}")))?;
        map.pin(&path).map_err(|e| err(format!("pinning {}: {e}", path.display())))?;
    }
    let mut map = header_map(&path)?;
    for layout in layouts(1, 1) {
        if dir.join(layout.name).exists() {
            map.insert(name_key(layout.name), LAYOUT_VERSION, 0)
                .map_err(|e| err(format!("{}: {e}", path.display())))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pinned_map_has_a_layout() {
        let mut checked: Vec<&str> = layouts(65537, 1 << 16).iter().map(|l| l.name).collect();
        let mut pinned = super::super::load::PINNED_MAPS.to_vec();
        pinned.sort_unstable();
        checked.sort_unstable();
        assert_eq!(checked, pinned, "a pinned map without a layout would be reused blind");
    }

    #[test]
    fn every_name_fits_the_record() {
        for layout in layouts(1, 1) {
            assert!(layout.name.len() < 16, "{} is too long for the layout record", layout.name);
        }
    }

    /// The version 1 bytes, laid out by hand from the history in lb_common::layout, come out
    /// as this build's values.
    #[cfg(not(feature = "layout-v1-test"))]
    #[test]
    fn version_1_values_convert_to_this_builds() {
        use lb_common::flow::{FlowEntry, FlowKey, FlowSlot};
        // VipInfo v1: forwarding, hash, _pad[2], id, encap_source, key.
        let info = VipInfo { id: 7, forwarding: 1, hash: 1, ..Default::default() };
        let mut v1 = [1u8, 1, 0, 0, 7, 0, 0, 0].to_vec();
        v1.extend_from_slice(&aya_bytes(&info)[8..]);
        vip_info_v1(&mut v1);
        assert_eq!(v1, aya_bytes(&info));
        // A flow way v1: key, vip_id, backend_id, generation, reply_hash, used, check.
        let entry = FlowEntry { backend_id: 3, vip_id: 9, generation: 2, reply_hash: 0xabcd };
        let mut set = ForwardSet::default();
        set.ways[1] = FlowSlot { key: FlowKey::default(), value: entry, used: 5, check: 11 };
        let mut bytes = aya_bytes(&set);
        let way1 = &mut bytes[64..128];
        way1[40..44].copy_from_slice(&9u32.to_ne_bytes());
        way1[44..48].copy_from_slice(&3u32.to_ne_bytes());
        flows_v1(&mut bytes);
        assert_eq!(bytes, aya_bytes(&set));
    }

    /// A version 3 CONFIG, laid out by hand (seven `u32`s, `share_flows` last), reads as this
    /// build's with the chained table hash: the hash its tables were made with.
    #[cfg(not(feature = "layout-v1-test"))]
    #[test]
    fn version_3_config_keeps_the_chained_table_hash() {
        use lb_common::table_hash::{TableHash, kind};
        let mut v3 = Vec::new();
        for word in [65537u32, 5, 2, 1024, 0xfeed, 100, 1] {
            v3.extend_from_slice(&word.to_ne_bytes());
        }
        config_hash_kind(&mut v3);
        let config = DataplaneConfig {
            ring_size: 65537,
            hash_seed: 5,
            nexthop_generation: 2,
            flow_sets: 1024,
            table_seed: 0xfeed,
            new_flow_budget: 100,
            share_flows: 1,
            ..Default::default()
        };
        assert_eq!(v3, aya_bytes(&config));
        assert_eq!(config.table_hash(), TableHash { kind: kind::CHAINED, seed: 0xfeed });
    }

    #[cfg(not(feature = "layout-v1-test"))]
    fn aya_bytes<T: aya::Pod>(value: &T) -> Vec<u8> {
        // SAFETY: a Pod value's bytes.
        unsafe { std::slice::from_raw_parts(value as *const T as *const u8, size_of::<T>()) }.to_vec()
    }
}
