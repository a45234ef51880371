//! The El Torito boot image: a FAT volume built in memory with the `fatfs`
//! crate (no mtools, no loop mounts). systemd-boot reads only the volume
//! it was loaded from, so the loader, its configuration, the kernel and
//! the initrd all live here.
//!
//! The volume is sized from the files: 4 KiB clusters, the FAT type
//! (12, 16 or 32) following from the cluster count as FAT requires. The
//! size is proven before the real build by formatting a dry run (only the
//! boot sector, FATs and root directory are written, so it is cheap) and
//! counting its free clusters. Directories get their "." and ".." entries
//! set right afterwards ([`dots`]). No I/O beyond memory happens here.

use std::io::{Cursor, Write};

use fatfs::{FileSystem, FormatVolumeOptions, FsOptions};

use super::VmediaError;

mod dots;

/// One file of the volume; `path` is '/'-separated from the root.
pub struct FatFile<'a> {
    pub path: &'a str,
    pub data: &'a [u8],
}

const SECTOR: u64 = 512;
const CLUSTER: u64 = 4096;
/// FAT's boot sector ends in a length-11 label, space-padded.
const LABEL: [u8; 11] = *b"METALHERD  ";
/// A fixed serial number: the same inputs give the same image.
const VOLUME_ID: u32 = 0x4D48_4552;
/// How many times a size that does not format (FAT type boundaries leave
/// gaps no geometry fills) or does not fit is grown before giving up.
const ATTEMPTS: u32 = 8;
/// Clusters added per attempt: more than the widest gap (about 61
/// clusters, at the FAT16/FAT32 boundary).
const GROWTH: u64 = 256;

/// The bytes of a FAT volume that holds `files` and their directories, a
/// multiple of 2048 (a whole number of CD sectors).
pub fn volume_len(files: &[FatFile]) -> Result<u64, VmediaError> {
    size_for(clusters_needed(files))
}

/// The first volume length tried that formats and has `need` free
/// clusters. It starts with slack (1/64 and 16 clusters more than needed)
/// so most sizes fit at the first try.
fn size_for(need: u64) -> Result<u64, VmediaError> {
    let mut clusters = need + need / 64 + 16;
    for _ in 0..ATTEMPTS {
        let len = layout_len(clusters);
        if let Ok(free) = free_clusters(len)
            && free >= need
        {
            return Ok(len);
        }
        clusters += GROWTH;
    }
    Err(VmediaError::Fat {
        what: format!("sizing a volume for {need} clusters of data"),
        source: std::io::Error::other("no FAT geometry found"),
    })
}

/// Format `volume` (its whole length, from [`volume_len`]) and write
/// `files` into it.
pub fn write_volume(volume: &mut [u8], files: &[FatFile]) -> Result<(), VmediaError> {
    let sectors =
        u32::try_from(volume.len() as u64 / SECTOR).map_err(|_| VmediaError::TooLarge {
            bytes: volume.len() as u64,
            limit: u64::from(u32::MAX) * SECTOR,
        })?;
    let fat = |what: &str| {
        let what = what.to_string();
        move |source| VmediaError::Fat { what, source }
    };
    fatfs::format_volume(Cursor::new(&mut *volume), format_options(sectors))
        .map_err(fat("formatting the volume"))?;
    let fs = FileSystem::new(Cursor::new(&mut *volume), FsOptions::new())
        .map_err(fat("opening the new volume"))?;
    {
        let root = fs.root_dir();
        for dir in directories(files) {
            root.create_dir(dir)
                .map_err(fat(&format!("creating {dir}/")))?;
        }
        for f in files {
            let mut file = root
                .create_file(f.path)
                .map_err(fat(&format!("creating {}", f.path)))?;
            file.write_all(f.data)
                .and_then(|()| file.flush())
                .map_err(fat(&format!("writing {}", f.path)))?;
        }
    }
    fs.unmount().map_err(fat("closing the volume"))?;
    dots::fix(volume, &directories(files))
}

fn format_options(sectors: u32) -> FormatVolumeOptions {
    FormatVolumeOptions::new()
        .bytes_per_sector(SECTOR as u16)
        .bytes_per_cluster(CLUSTER as u32)
        .total_sectors(sectors)
        .volume_label(LABEL)
        .volume_id(VOLUME_ID)
}

/// Clusters for the files' data and one per directory (each holds a few
/// entries; the root directory is the format's own).
fn clusters_needed(files: &[FatFile]) -> u64 {
    let data: u64 = files
        .iter()
        .map(|f| (f.data.len() as u64).div_ceil(CLUSTER))
        .sum();
    data + directories(files).len() as u64
}

/// Every directory the files sit in, parents first, each once.
fn directories<'a>(files: &[FatFile<'a>]) -> Vec<&'a str> {
    let mut dirs: Vec<&str> = Vec::new();
    for f in files {
        let mut end = 0;
        while let Some(i) = f.path[end..].find('/') {
            end += i;
            let dir = &f.path[..end];
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
            end += 1;
        }
    }
    dirs
}

/// Bytes for `clusters` of data plus an upper bound on the rest: 32
/// reserved sectors (fatfs uses 8 or 1), a 512-entry FAT12/16 root
/// directory, and two FATs of 4-byte (FAT32-sized) entries.
fn layout_len(clusters: u64) -> u64 {
    let fat_sectors = ((clusters + 2) * 4).div_ceil(SECTOR);
    let sectors = 32 + 32 + 2 * fat_sectors + clusters * (CLUSTER / SECTOR);
    sectors.next_multiple_of(2048 / SECTOR) * SECTOR
}

/// Format a volume of `len` bytes as a dry run and count its free
/// clusters. Only the metadata at the start is written; a cursor over an
/// empty vector grows just that far.
fn free_clusters(len: u64) -> std::io::Result<u64> {
    let sectors = u32::try_from(len / SECTOR).map_err(std::io::Error::other)?;
    let mut disk = Cursor::new(Vec::new());
    fatfs::format_volume(&mut disk, format_options(sectors))?;
    disk.set_position(0);
    let fs = FileSystem::new(disk, FsOptions::new())?;
    Ok(u64::from(fs.stats()?.free_clusters()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn build(files: &[FatFile]) -> Vec<u8> {
        let len = volume_len(files).unwrap();
        let mut v = vec![0u8; len as usize];
        write_volume(&mut v, files).unwrap();
        v
    }

    fn read(volume: &mut [u8], path: &str) -> Vec<u8> {
        let fs = FileSystem::new(Cursor::new(volume), FsOptions::new()).unwrap();
        let mut out = Vec::new();
        fs.root_dir()
            .open_file(path)
            .unwrap()
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn files_read_back_with_their_contents() {
        let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let files = [
            FatFile {
                path: "EFI/BOOT/BOOTX64.EFI",
                data: b"MZ loader",
            },
            FatFile {
                path: "loader/loader.conf",
                data: b"timeout 0\n",
            },
            FatFile {
                path: "loader/entries/metalherd.conf",
                data: b"title x\n",
            },
            FatFile {
                path: "vmlinuz",
                data: &big,
            },
            FatFile {
                path: "initrd",
                data: b"",
            },
        ];
        let mut v = build(&files);
        assert_eq!(v.len() % 2048, 0);
        for f in &files {
            assert_eq!(read(&mut v, f.path), f.data, "{}", f.path);
        }
        let fs = FileSystem::new(Cursor::new(&mut v[..]), FsOptions::new()).unwrap();
        assert_eq!(fs.volume_label(), "METALHERD");
        assert_eq!(fs.fat_type(), fatfs::FatType::Fat12);
    }

    #[test]
    fn directories_are_listed_parents_first_once() {
        let files = [
            FatFile {
                path: "a/b/c",
                data: b"",
            },
            FatFile {
                path: "a/b/d",
                data: b"",
            },
            FatFile {
                path: "a/e",
                data: b"",
            },
            FatFile {
                path: "f",
                data: b"",
            },
        ];
        assert_eq!(directories(&files), ["a", "a/b"]);
    }

    /// Around the FAT12/16 and FAT16/32 boundaries (4085 and 65525
    /// clusters) some volume sizes fit no FAT type. Every data size whose
    /// first try lands there still gets a volume that formats and has room.
    #[test]
    fn sizes_across_fat_type_boundaries_format_and_fit() {
        // Here they are 4077 and 65458 to 65517 (scanned sparsely).
        let gaps: Vec<u64> = (4_060..4_100)
            .chain((65_440..65_530).step_by(5))
            .filter(|&c| free_clusters(layout_len(c)).is_err())
            .collect();
        assert!(!gaps.is_empty(), "no size fell into a gap");
        for c in gaps {
            // The need whose first try is `c` clusters.
            let need = (0..c).rev().find(|n| n + n / 64 + 16 <= c).unwrap();
            let len = size_for(need).unwrap();
            assert!(free_clusters(len).unwrap() >= need, "{need}");
        }
    }

    /// Past 65524 clusters (about 256 MiB) the volume is FAT32. The
    /// size is asked for directly, so the test writes little data.
    #[test]
    fn a_volume_past_the_fat16_range_is_fat32_and_holds_its_files() {
        let data: Vec<u8> = (0..5_000_000u32).map(|i| (i % 249) as u8).collect();
        let files = [
            FatFile {
                path: "EFI/BOOT/BOOTX64.EFI",
                data: b"MZ",
            },
            FatFile {
                path: "initrd",
                data: &data,
            },
        ];
        let len = size_for(70_000).unwrap();
        let mut v = vec![0u8; len as usize];
        write_volume(&mut v, &files).unwrap();
        let fs = FileSystem::new(Cursor::new(&mut v[..]), FsOptions::new()).unwrap();
        assert_eq!(fs.fat_type(), fatfs::FatType::Fat32);
        drop(fs);
        for f in &files {
            assert!(read(&mut v, f.path) == f.data, "{}", f.path);
        }
    }
}
