//! The ISO 9660 (ECMA-119) image around the El Torito boot image: no I/O,
//! only bytes. The layout is fixed, so the boot image's place is known
//! before it exists and the caller can build the FAT volume straight into
//! the image's tail:
//!
//! | LBA | what |
//! | --- | --- |
//! | 0-15 | system area, zero |
//! | 16 | Primary Volume Descriptor |
//! | 17 | Boot Record Volume Descriptor (El Torito) |
//! | 18 | Volume Descriptor Set Terminator |
//! | 19 | boot catalog: validation entry + initial/default entry |
//! | 20, 21 | type L and type M path tables (the root only) |
//! | 22 | root directory: `.`, `..`, `EFIBOOT.IMG;1` |
//! | 23.. | the FAT boot image, padded to 2048 bytes, last |
//!
//! The FAT image goes last because firmware given a boot image of "one
//! sector" takes the medium from the image to the end of the volume (see
//! [`catalog_sector_count`]). Dates are "not specified" (all zero), so
//! the same inputs give the same bytes.

use super::VmediaError;

/// ISO 9660 logical block size.
pub const SECTOR: usize = 2048;
/// Where the FAT boot image starts; everything before it is [`header`].
pub const BOOT_IMAGE_LBA: u32 = 23;

const PVD_LBA: u32 = 16;
const BOOT_RECORD_LBA: u32 = 17;
const TERMINATOR_LBA: u32 = 18;
const CATALOG_LBA: u32 = 19;
const L_PATH_TABLE_LBA: u32 = 20;
const M_PATH_TABLE_LBA: u32 = 21;
const ROOT_DIR_LBA: u32 = 22;
/// One entry (the root): 8 bytes + a 1-byte identifier + 1 pad byte.
const PATH_TABLE_LEN: u32 = 10;

const VOLUME_ID: &str = "METALHERD";
const BOOT_IMAGE_NAME: &str = "EFIBOOT.IMG;1";
/// El Torito platform id for EFI.
const PLATFORM_EFI: u8 = 0xEF;
/// El Torito sector counts are in 512-byte "virtual sectors".
const VIRTUAL_SECTOR: u64 = 512;

/// The bytes of sectors 0 to [`BOOT_IMAGE_LBA`] - 1 for a boot image of
/// `boot_len` bytes that follows them (padded by the caller to a whole
/// sector; see [`image_len`]).
pub fn header(boot_len: u64) -> Result<Vec<u8>, VmediaError> {
    // ISO 9660 data lengths are 32-bit; the volume size in sectors is too.
    let boot_len32 = u32::try_from(boot_len).map_err(|_| VmediaError::TooLarge {
        bytes: boot_len,
        limit: u64::from(u32::MAX),
    })?;
    let volume_sectors = image_len(boot_len) / SECTOR as u64;
    let volume_sectors = u32::try_from(volume_sectors).map_err(|_| VmediaError::TooLarge {
        bytes: boot_len,
        limit: u64::from(u32::MAX),
    })?;

    let mut out = vec![0u8; BOOT_IMAGE_LBA as usize * SECTOR];
    let mut put = |lba: u32, bytes: &[u8]| {
        let at = lba as usize * SECTOR;
        out[at..at + bytes.len()].copy_from_slice(bytes);
    };
    put(PVD_LBA, &primary_volume_descriptor(volume_sectors));
    put(BOOT_RECORD_LBA, &boot_record());
    put(TERMINATOR_LBA, &terminator());
    put(CATALOG_LBA, &boot_catalog(boot_len));
    put(L_PATH_TABLE_LBA, &path_table(false));
    put(M_PATH_TABLE_LBA, &path_table(true));
    put(ROOT_DIR_LBA, &root_directory(boot_len32));
    Ok(out)
}

/// Length of the whole image: the header and the boot image padded to 2048.
pub fn image_len(boot_len: u64) -> u64 {
    u64::from(BOOT_IMAGE_LBA) * SECTOR as u64 + boot_len.div_ceil(SECTOR as u64) * SECTOR as u64
}

/// The boot entry's sector count, in 512-byte units. Past 65535 units (the
/// field is 16 bits) it is 1: EDK2 (OVMF and most server firmware) then
/// takes the boot image to run from its LBA to the end of the volume (the
/// PVD's volume space size, or the medium's last block if smaller), which
/// is exactly the FAT image because it is last. Note that EDK2 multiplies
/// the count of a no-emulation entry by the medium's block size (2048 on a
/// CD), not by 512, so for a small image it sees a partition 4 times too
/// long; harmless, as the FAT driver reads only what the FAT's own boot
/// sector says it has. We write the value El Torito specifies.
pub fn catalog_sector_count(boot_len: u64) -> u16 {
    match u16::try_from(boot_len.div_ceil(VIRTUAL_SECTOR)) {
        Ok(n) if n >= 1 => n,
        _ => 1,
    }
}

/// 32-bit both-byte-order field (ECMA-119 7.3.3): little-endian, then big.
fn both32(v: u32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&v.to_le_bytes());
    b[4..].copy_from_slice(&v.to_be_bytes());
    b
}

/// 16-bit both-byte-order field (ECMA-119 7.2.3).
fn both16(v: u16) -> [u8; 4] {
    let mut b = [0u8; 4];
    b[..2].copy_from_slice(&v.to_le_bytes());
    b[2..].copy_from_slice(&v.to_be_bytes());
    b
}

/// `s` left-aligned in a field of `len` bytes filled with `fill`.
fn padded(s: &str, len: usize, fill: u8) -> Vec<u8> {
    let mut v = vec![fill; len];
    let n = s.len().min(len);
    v[..n].copy_from_slice(&s.as_bytes()[..n]);
    v
}

/// The start of every volume descriptor: type, "CD001", version 1.
fn descriptor(kind: u8) -> [u8; SECTOR] {
    let mut d = [0u8; SECTOR];
    d[0] = kind;
    d[1..6].copy_from_slice(b"CD001");
    d[6] = 1;
    d
}

/// ECMA-119 8.4.
fn primary_volume_descriptor(volume_sectors: u32) -> [u8; SECTOR] {
    let mut d = descriptor(1);
    d[8..40].copy_from_slice(&padded("", 32, b' ')); // system identifier
    d[40..72].copy_from_slice(&padded(VOLUME_ID, 32, b' '));
    d[80..88].copy_from_slice(&both32(volume_sectors));
    d[120..124].copy_from_slice(&both16(1)); // volume set size
    d[124..128].copy_from_slice(&both16(1)); // volume sequence number
    d[128..132].copy_from_slice(&both16(SECTOR as u16)); // logical block size
    d[132..140].copy_from_slice(&both32(PATH_TABLE_LEN));
    d[140..144].copy_from_slice(&L_PATH_TABLE_LBA.to_le_bytes());
    d[148..152].copy_from_slice(&M_PATH_TABLE_LBA.to_be_bytes());
    d[156..190].copy_from_slice(&dir_record(&[0], ROOT_DIR_LBA, SECTOR as u32, true));
    // Volume set, publisher and data preparer ids (128 bytes each), the
    // application id (128), then the copyright, abstract and bibliographic
    // file ids (37 each): blank but for the application.
    d[190..574].copy_from_slice(&padded("", 384, b' '));
    d[574..702].copy_from_slice(&padded(VOLUME_ID, 128, b' '));
    d[702..813].copy_from_slice(&padded("", 111, b' '));
    // Creation, modification, expiration, effective: "not specified"
    // (16 digits '0' and a zero offset, ECMA-119 8.4.26.1).
    for at in [813, 830, 847, 864] {
        d[at..at + 16].copy_from_slice(b"0000000000000000");
    }
    d[881] = 1; // file structure version
    d
}

/// The El Torito Boot Record Volume Descriptor.
fn boot_record() -> [u8; SECTOR] {
    let mut d = descriptor(0);
    d[7..39].copy_from_slice(&padded("EL TORITO SPECIFICATION", 32, 0));
    d[71..75].copy_from_slice(&CATALOG_LBA.to_le_bytes());
    d
}

/// ECMA-119 8.3.
fn terminator() -> [u8; SECTOR] {
    descriptor(255)
}

/// A validation entry for EFI and one bootable no-emulation entry.
fn boot_catalog(boot_len: u64) -> [u8; 64] {
    let mut c = [0u8; 64];
    c[0] = 1; // header id
    c[1] = PLATFORM_EFI;
    c[4..28].copy_from_slice(&padded(VOLUME_ID, 24, 0));
    c[30] = 0x55;
    c[31] = 0xAA;
    // The 16 little-endian words of the entry sum to zero.
    let sum = c[..32].chunks_exact(2).fold(0u16, |s, w| {
        s.wrapping_add(u16::from_le_bytes([w[0], w[1]]))
    });
    c[28..30].copy_from_slice(&sum.wrapping_neg().to_le_bytes());

    let e = &mut c[32..];
    e[0] = 0x88; // bootable
    e[1] = 0; // media type: no emulation
    // Load segment 0 (the default) and system type 0 stay zero.
    e[6..8].copy_from_slice(&catalog_sector_count(boot_len).to_le_bytes());
    e[8..12].copy_from_slice(&BOOT_IMAGE_LBA.to_le_bytes());
    c
}

/// ECMA-119 9.4: one entry, the root, which is directory number 1 and its
/// own parent; numbers in the table's byte order (L: little, M: big).
fn path_table(big_endian: bool) -> [u8; PATH_TABLE_LEN as usize] {
    let mut t = [0u8; PATH_TABLE_LEN as usize];
    t[0] = 1; // identifier length; the identifier (t[8]) is 0, t[9] pads
    if big_endian {
        t[2..6].copy_from_slice(&ROOT_DIR_LBA.to_be_bytes());
        t[6..8].copy_from_slice(&1u16.to_be_bytes());
    } else {
        t[2..6].copy_from_slice(&ROOT_DIR_LBA.to_le_bytes());
        t[6..8].copy_from_slice(&1u16.to_le_bytes());
    }
    t
}

fn root_directory(boot_len: u32) -> Vec<u8> {
    let mut d = Vec::with_capacity(SECTOR);
    d.extend(dir_record(&[0], ROOT_DIR_LBA, SECTOR as u32, true)); // "."
    d.extend(dir_record(&[1], ROOT_DIR_LBA, SECTOR as u32, true)); // ".."
    d.extend(dir_record(
        BOOT_IMAGE_NAME.as_bytes(),
        BOOT_IMAGE_LBA,
        boot_len,
        false,
    ));
    d
}

/// ECMA-119 9.1. Recording date all zero: not specified.
fn dir_record(id: &[u8], lba: u32, len: u32, dir: bool) -> Vec<u8> {
    let pad = usize::from(id.len().is_multiple_of(2));
    let total = 33 + id.len() + pad;
    let mut r = vec![0u8; total];
    r[0] = total as u8;
    r[2..10].copy_from_slice(&both32(lba));
    r[10..18].copy_from_slice(&both32(len));
    r[25] = if dir { 0x02 } else { 0 };
    r[28..32].copy_from_slice(&both16(1)); // volume sequence number
    r[32] = id.len() as u8;
    r[33..33 + id.len()].copy_from_slice(id);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: usize = SECTOR;

    fn le32(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    /// A both-byte-order u32 at `at`; its halves must agree.
    fn both32_at(b: &[u8], at: usize) -> u32 {
        let le = le32(b, at);
        let be = u32::from_be_bytes([b[at + 4], b[at + 5], b[at + 6], b[at + 7]]);
        assert_eq!(le, be, "both-endian field at {at}");
        le
    }

    fn both16_at(b: &[u8], at: usize) -> u16 {
        let le = u16::from_le_bytes([b[at], b[at + 1]]);
        let be = u16::from_be_bytes([b[at + 2], b[at + 3]]);
        assert_eq!(le, be, "both-endian field at {at}");
        le
    }

    #[test]
    fn both_endian_encodings() {
        assert_eq!(both32(0x0102_0304), [4, 3, 2, 1, 1, 2, 3, 4]);
        assert_eq!(both16(0x0102), [2, 1, 1, 2]);
    }

    #[test]
    fn descriptors_sit_at_sectors_16_to_18() {
        let boot_len = 5 * S as u64 + 100;
        let h = header(boot_len).unwrap();
        assert_eq!(h.len(), BOOT_IMAGE_LBA as usize * S);
        assert!(h[..16 * S].iter().all(|&b| b == 0), "system area");

        let pvd = &h[16 * S..17 * S];
        assert_eq!(&pvd[..7], b"\x01CD001\x01");
        assert_eq!(&pvd[40..72], format!("{:32}", "METALHERD").as_bytes());
        // 23 header sectors + the boot image rounded up to 6 sectors.
        assert_eq!(both32_at(pvd, 80), 29);
        assert_eq!(image_len(boot_len), 29 * S as u64);
        assert_eq!(both16_at(pvd, 120), 1);
        assert_eq!(both16_at(pvd, 124), 1);
        assert_eq!(both16_at(pvd, 128), 2048);
        assert_eq!(both32_at(pvd, 132), PATH_TABLE_LEN);
        assert_eq!(le32(pvd, 140), L_PATH_TABLE_LBA);
        assert_eq!(
            u32::from_be_bytes(pvd[148..152].try_into().unwrap()),
            M_PATH_TABLE_LBA
        );
        // The root directory record: 34 bytes, a directory at LBA 22.
        assert_eq!(pvd[156], 34);
        assert_eq!(both32_at(pvd, 158), ROOT_DIR_LBA);
        assert_eq!(both32_at(pvd, 166), 2048);
        assert_eq!(pvd[181], 0x02);
        assert_eq!(pvd[881], 1);

        let br = &h[17 * S..18 * S];
        assert_eq!(&br[..7], b"\x00CD001\x01");
        assert_eq!(&br[7..30], b"EL TORITO SPECIFICATION");
        assert!(br[30..39].iter().all(|&b| b == 0));
        assert_eq!(le32(br, 71), CATALOG_LBA);

        assert_eq!(&h[18 * S..18 * S + 7], b"\xffCD001\x01");
    }

    #[test]
    fn the_catalog_names_an_efi_no_emulation_image_and_checks_out() {
        let h = header(4 * S as u64).unwrap();
        let c = &h[CATALOG_LBA as usize * S..][..64];
        assert_eq!(c[0], 1);
        assert_eq!(c[1], 0xEF);
        assert_eq!(&c[30..32], &[0x55, 0xAA]);
        let sum = c[..32].chunks_exact(2).fold(0u16, |s, w| {
            s.wrapping_add(u16::from_le_bytes([w[0], w[1]]))
        });
        assert_eq!(sum, 0);

        let e = &c[32..];
        assert_eq!(e[0], 0x88);
        assert_eq!(e[1], 0, "no emulation");
        assert_eq!(&e[2..6], &[0, 0, 0, 0], "load segment and system type");
        assert_eq!(
            u16::from_le_bytes([e[6], e[7]]),
            16,
            "4 CD sectors = 16 x 512"
        );
        assert_eq!(le32(e, 8), BOOT_IMAGE_LBA);
    }

    #[test]
    fn sector_count_is_exact_up_to_the_field_and_1_past_it() {
        assert_eq!(catalog_sector_count(512), 1);
        assert_eq!(catalog_sector_count(513), 2);
        assert_eq!(catalog_sector_count(65_535 * 512), 65_535);
        assert_eq!(catalog_sector_count(65_535 * 512 + 1), 1);
        assert_eq!(catalog_sector_count(1 << 30), 1);
    }

    #[test]
    fn path_tables_hold_the_root_in_both_byte_orders() {
        let h = header(S as u64).unwrap();
        let l = &h[L_PATH_TABLE_LBA as usize * S..][..10];
        let m = &h[M_PATH_TABLE_LBA as usize * S..][..10];
        assert_eq!(l, &[1, 0, 22, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(m, &[1, 0, 0, 0, 0, 22, 0, 1, 0, 0]);
    }

    #[test]
    fn the_root_directory_points_at_the_boot_image() {
        let boot_len = 40_000_000;
        let h = header(boot_len).unwrap();
        let d = &h[ROOT_DIR_LBA as usize * S..][..S];
        // ".": 34 bytes, identifier 0x00; "..": identifier 0x01.
        assert_eq!((d[0], d[32], d[33]), (34, 1, 0));
        assert_eq!(both32_at(d, 2), ROOT_DIR_LBA);
        assert_eq!((d[34], d[34 + 32], d[34 + 33]), (34, 1, 1));
        let f = &d[68..];
        assert_eq!(f[0] as usize, 33 + 13);
        assert_eq!(both32_at(f, 2), BOOT_IMAGE_LBA);
        assert_eq!(u64::from(both32_at(f, 10)), boot_len);
        assert_eq!(f[25], 0, "a plain file");
        assert_eq!(both16_at(f, 28), 1);
        assert_eq!(&f[32..46], b"\x0dEFIBOOT.IMG;1");
        assert!(d[68 + 46..].iter().all(|&b| b == 0));
        // A 40 MB image is past the 16-bit sector count: 1, to the end.
        let c = &h[CATALOG_LBA as usize * S + 32..];
        assert_eq!(u16::from_le_bytes([c[6], c[7]]), 1);
    }

    #[test]
    fn a_boot_image_past_4_gib_is_refused() {
        assert!(matches!(
            header(1 << 32),
            Err(VmediaError::TooLarge { bytes, .. }) if bytes == 1 << 32
        ));
        assert!(header(u64::from(u32::MAX) - 4096).is_ok());
    }

    #[test]
    fn same_input_same_bytes() {
        assert_eq!(header(12_345).unwrap(), header(12_345).unwrap());
    }

    proptest::proptest! {
        /// For any boot image length an ISO file can hold, the fields that
        /// locate and size it agree with one another.
        #[test]
        fn every_length_gives_a_consistent_header(boot_len in 1u64..=u64::from(u32::MAX)) {
            let h = header(boot_len).unwrap();
            let pvd = &h[16 * S..];
            let sectors = u64::from(both32_at(pvd, 80));
            proptest::prop_assert_eq!(sectors * S as u64, image_len(boot_len));
            proptest::prop_assert_eq!(sectors, 23 + boot_len.div_ceil(S as u64));
            let f = &h[ROOT_DIR_LBA as usize * S + 68..];
            proptest::prop_assert_eq!(u64::from(both32_at(f, 10)), boot_len);
            let c = &h[CATALOG_LBA as usize * S..][..64];
            let sum = c[..32]
                .chunks_exact(2)
                .fold(0u16, |s, w| s.wrapping_add(u16::from_le_bytes([w[0], w[1]])));
            proptest::prop_assert_eq!(sum, 0);
            let count = u64::from(u16::from_le_bytes([c[38], c[39]]));
            if boot_len <= 65_535 * 512 {
                proptest::prop_assert_eq!(count, boot_len.div_ceil(512));
            } else {
                proptest::prop_assert_eq!(count, 1);
            }
        }
    }
}
