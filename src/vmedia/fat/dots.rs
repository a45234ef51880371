//! A repair of the "." and ".." entries fatfs 0.3.6 writes. It puts a
//! long-name entry in front of each of them (so a new directory's first
//! slots are LFN, ".", LFN, "..") and, on FAT32, points a first-level
//! directory's ".." at the root's cluster instead of 0. Both are fixed
//! upstream after 0.3.6 (rafalh/rust-fatfs#100, #99), in no release yet.
//! EDK2's FAT driver copes, but fsck.fat calls such directories broken and
//! other firmware need not cope, so each directory is set right here: "."
//! and ".." in the first two slots, the long names made deleted entries,
//! and ".." of a directory in the root pointing at cluster 0.
//!
//! Works on the bytes of a volume fatfs has written and unmounted, on the
//! directories it is given (short names, each in its first cluster).

use std::ops::Range;

use super::super::VmediaError;

const ENTRY: usize = 32;
const ATTR_DIR: u8 = 0x10;
const ATTR_LFN: u8 = 0x0F;
const DELETED: u8 = 0xE5;
const DOT: &[u8; 11] = b".          ";
const DOTDOT: &[u8; 11] = b"..         ";

/// Where things are, from the boot sector.
struct Geometry {
    root: Range<usize>,
    data_start: usize,
    cluster_bytes: usize,
}

/// Repair `dirs` ('/'-separated paths, parents before children).
pub fn fix(volume: &mut [u8], dirs: &[&str]) -> Result<(), VmediaError> {
    let broken = |dir: &str, why: &str| VmediaError::Fat {
        what: format!("repairing the . and .. entries of {dir}/"),
        source: std::io::Error::other(why.to_string()),
    };
    let g = geometry(volume).ok_or_else(|| broken("/", "unreadable boot sector"))?;
    for dir in dirs {
        let mut at = g.root.clone();
        for part in dir.split('/') {
            let name = short_name(part).ok_or_else(|| broken(dir, "not an 8.3 name"))?;
            let cluster = find(volume, at, &name).ok_or_else(|| broken(dir, "not found"))?;
            at = cluster_range(&g, cluster, volume.len())
                .ok_or_else(|| broken(dir, "cluster out of range"))?;
        }
        let slots = &mut volume[at.start..at.start + 4 * ENTRY];
        let is = |slots: &[u8], i: usize, name: &[u8; 11]| {
            slots[i * ENTRY..i * ENTRY + 11] == name[..] && slots[i * ENTRY + 11] == ATTR_DIR
        };
        let is_lfn = |slots: &[u8], i: usize| slots[i * ENTRY + 11] == ATTR_LFN;
        if is_lfn(slots, 0) && is(slots, 1, DOT) && is_lfn(slots, 2) && is(slots, 3, DOTDOT) {
            slots.copy_within(ENTRY..2 * ENTRY, 0);
            slots.copy_within(3 * ENTRY..4 * ENTRY, ENTRY);
            for slot in slots[2 * ENTRY..].chunks_exact_mut(ENTRY) {
                slot.fill(0);
                slot[0] = DELETED;
            }
        }
        if !(is(slots, 0, DOT) && is(slots, 1, DOTDOT)) {
            return Err(broken(dir, "no . and .. at the start"));
        }
        if !dir.contains('/') {
            // The root's cluster is always written as 0.
            slots[ENTRY + 20..ENTRY + 22].fill(0);
            slots[ENTRY + 26..ENTRY + 28].fill(0);
        }
    }
    Ok(())
}

fn le16(v: &[u8], at: usize) -> Option<usize> {
    Some(usize::from(u16::from_le_bytes([
        *v.get(at)?,
        *v.get(at + 1)?,
    ])))
}

fn le32(v: &[u8], at: usize) -> Option<usize> {
    let b = v.get(at..at + 4)?;
    usize::try_from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok()
}

/// The BIOS Parameter Block's layout (the same offsets for FAT12/16/32 up
/// to byte 36; FAT32 has its FAT size at 36 and root cluster at 44).
fn geometry(v: &[u8]) -> Option<Geometry> {
    let sector = le16(v, 11)?;
    let cluster_bytes = sector * usize::from(*v.get(13)?);
    let reserved = le16(v, 14)?;
    let fats = usize::from(*v.get(16)?);
    let root_entries = le16(v, 17)?;
    let fat16_size = le16(v, 22)?;
    let fat_size = if fat16_size != 0 {
        fat16_size
    } else {
        le32(v, 36)?
    };
    let root_start = (reserved + fats * fat_size) * sector;
    let root_len = (root_entries * ENTRY).div_ceil(sector) * sector;
    let data_start = root_start + root_len;
    let mut g = Geometry {
        root: root_start..data_start,
        data_start,
        cluster_bytes,
    };
    if root_entries == 0 {
        // FAT32: the root directory is a cluster chain; ours fits its first.
        g.root = cluster_range(&g, le32(v, 44)?, v.len())?;
    }
    Some(g)
}

fn cluster_range(g: &Geometry, cluster: usize, len: usize) -> Option<Range<usize>> {
    let start = g.data_start + cluster.checked_sub(2)? * g.cluster_bytes;
    let end = start + g.cluster_bytes;
    (end <= len && g.cluster_bytes >= 4 * ENTRY).then_some(start..end)
}

/// The 8.3 name of a directory whose name fits it without an extension.
fn short_name(part: &str) -> Option<[u8; 11]> {
    let ok = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'-';
    if part.is_empty() || part.len() > 8 || !part.bytes().all(ok) {
        return None;
    }
    let mut n = [b' '; 11];
    n[..part.len()].copy_from_slice(part.to_ascii_uppercase().as_bytes());
    Some(n)
}

/// The first cluster of the subdirectory `name` in the entries at `at`.
fn find(v: &[u8], at: Range<usize>, name: &[u8; 11]) -> Option<usize> {
    for e in v.get(at)?.chunks_exact(ENTRY) {
        match e[0] {
            0 => return None,
            DELETED => continue,
            _ if e[11] == ATTR_LFN => continue,
            _ if &e[..11] == name && e[11] & ATTR_DIR != 0 => {
                let hi = usize::from(u16::from_le_bytes([e[20], e[21]]));
                let lo = usize::from(u16::from_le_bytes([e[26], e[27]]));
                return Some(hi << 16 | lo);
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::{FatFile, size_for, volume_len, write_volume};
    use super::*;

    const FILES: [FatFile; 3] = [
        FatFile {
            path: "EFI/BOOT/BOOTX64.EFI",
            data: b"MZ",
        },
        FatFile {
            path: "loader/entries/metalherd.conf",
            data: b"title x\n",
        },
        FatFile {
            path: "top",
            data: b"t",
        },
    ];
    const DIRS: [&str; 4] = ["EFI", "EFI/BOOT", "loader", "loader/entries"];

    /// Each directory starts with "." (its own cluster) and ".." (its
    /// parent's, 0 for the root).
    fn check(v: &[u8]) {
        let g = geometry(v).unwrap();
        for dir in DIRS {
            let (parent, own) = {
                let mut at = g.root.clone();
                let mut parent = 0;
                let mut own = 0;
                for part in dir.split('/') {
                    parent = own;
                    own = find(v, at, &short_name(part).unwrap()).unwrap();
                    at = cluster_range(&g, own, v.len()).unwrap();
                }
                (parent, own)
            };
            let at = cluster_range(&g, own, v.len()).unwrap().start;
            let cluster = |e: &[u8]| {
                usize::from(u16::from_le_bytes([e[20], e[21]])) << 16
                    | usize::from(u16::from_le_bytes([e[26], e[27]]))
            };
            let (dot, dotdot) = (&v[at..at + 32], &v[at + 32..at + 64]);
            assert_eq!((&dot[..11], dot[11]), (&DOT[..], ATTR_DIR), "{dir}");
            assert_eq!(
                (&dotdot[..11], dotdot[11]),
                (&DOTDOT[..], ATTR_DIR),
                "{dir}"
            );
            assert_eq!(cluster(dot), own, "{dir}");
            assert_eq!(cluster(dotdot), parent, "{dir}");
        }
    }

    #[test]
    fn directories_start_with_dot_and_dotdot_on_fat12() {
        let mut v = vec![0u8; volume_len(&FILES).unwrap() as usize];
        write_volume(&mut v, &FILES).unwrap();
        check(&v);
    }

    #[test]
    fn directories_start_with_dot_and_dotdot_on_fat32() {
        let mut v = vec![0u8; size_for(70_000).unwrap() as usize];
        write_volume(&mut v, &FILES).unwrap();
        check(&v);
    }

    #[test]
    fn names_that_are_not_8_3_are_refused() {
        assert_eq!(short_name("loader"), Some(*b"LOADER     "));
        assert_eq!(short_name("toolongname"), None);
        assert_eq!(short_name("a.b"), None);
        let mut v = vec![0u8; volume_len(&FILES).unwrap() as usize];
        write_volume(&mut v, &FILES).unwrap();
        assert!(fix(&mut v, &["nosuchdir"]).is_err());
    }
}
