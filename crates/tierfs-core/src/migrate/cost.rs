//! What a move asks of the two devices: the requests the migration protocol
//! makes on each tier, in its order (open the source, stage a copy, copy the
//! data and the attributes, sync, link it into place, remove the staging
//! name and the source, sync the directories), for the simulator to charge
//! its device models as `--emulate` charges a mount's. The test
//! `vfs::tests::a_move_asks_the_devices_what_the_cost_model_says` holds it
//! to what `Volume::migrate` does on emulated stores.

use crate::device::Req;
use crate::migrate::Move;
use crate::tier::Tier;

/// Metadata keys of tierfs's own directories (`.tierfs`, its staging
/// directory), the same on every tier.
const RESERVED_KEY: u64 = u64::MAX - 1;
const STAGING_KEY: u64 = u64::MAX - 2;
/// What one copy request moves (`migrate::CHUNK`).
const CHUNK: u64 = super::CHUNK as u64;

/// Metadata key of a file's name (as opposed to the file, `file`).
pub fn entry_key(file: u64) -> u64 {
    file ^ 0x9e37_79b9_7f4a_7c15
}

/// Metadata key of a directory.
pub fn dir_key(dir: u64) -> u64 {
    dir ^ 0x6a09_e667_f3bc_c909
}

/// The requests of `mv` of a file of `size` bytes, numbered `file` on both
/// tiers, in directory `dir`, once that directory exists on the target
/// (the first move into a directory also makes it): `(tier, request)` in
/// the protocol's order. A dropped copy only removes the SSD's name.
pub fn requests(mv: Move, file: u64, dir: u64, size: u64) -> Vec<(Tier, Req)> {
    let entry = entry_key(file);
    // The SSD holds the directories whose times tierfs reports: a move
    // that adds or removes a name there reads the directory's times before,
    // sets its mtime back after and reads the ctime that moved.
    let dir_time = [
        (Tier::Ssd, Req::MetaRead { key: dir_key(dir) }),
        (Tier::Ssd, Req::MetaWrite { key: dir_key(dir) }),
        (Tier::Ssd, Req::MetaRead { key: dir_key(dir) }),
    ];
    if mv == Move::DropCopy {
        let mut v = vec![(Tier::Ssd, Req::MetaRead { key: entry })];
        v.extend(dir_time);
        v.extend([(Tier::Ssd, Req::MetaWrite { key: entry }), (Tier::Ssd, Req::Sync)]);
        return v;
    }
    let (from, to) = match mv {
        Move::Demote => (Tier::Ssd, Tier::Hdd),
        _ => (Tier::Hdd, Tier::Ssd),
    };
    let staged = file ^ 0xbb67_ae85_84ca_a73b;
    let mut v = vec![
        // The source opened, the staging file made.
        (from, Req::MetaRead { key: entry }),
        (to, Req::MetaRead { key: RESERVED_KEY }),
        (to, Req::MetaRead { key: STAGING_KEY }),
        (to, Req::MetaWrite { key: staged }),
    ];
    // The data, a chunk at a time, then the source's attributes and
    // extended attributes read and its owner, mode and times set on the
    // copy.
    let mut off = 0;
    while off < size {
        let len = CHUNK.min(size - off);
        v.extend([(from, Req::Read { file, off, len }), (to, Req::Write { file, off, len })]);
        off += len;
    }
    v.extend([(from, Req::MetaRead { key: file }); 3]);
    v.extend([(to, Req::MetaWrite { key: file }); 3]);
    v.extend([
        (to, Req::Sync),
        // The switch-over: the target name looked up, the directory's time
        // read, the copy linked under it, the staging name removed, the
        // directory synced.
        (to, Req::MetaRead { key: dir_key(dir) }),
        (to, Req::MetaRead { key: entry }),
        dir_time[0],
        (to, Req::MetaWrite { key: entry }),
        (to, Req::MetaWrite { key: staged }),
        (to, Req::Sync),
    ]);
    if mv != Move::Copy {
        // The source's name removed and its directory synced.
        v.push((from, Req::MetaWrite { key: entry }));
        v.extend([dir_time[1], dir_time[2]]);
        v.push((from, Req::Sync));
    } else {
        v.extend([dir_time[1], dir_time[2]]);
    }
    v
}
