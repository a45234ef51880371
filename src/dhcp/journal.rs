//! The lease journal's on-disk format: a header naming the file's current
//! generation, then fixed-size records, one per [`LeaseWrite`], each with
//! its generation and a CRC-32C. Pure: encodes records into a buffer and
//! replays a file's bytes; no files, no clock (`lease_store` does the I/O).
//!
//! A journal file is preallocated and reused: starting it anew writes a
//! header with a fresh generation, and records of older generations left
//! behind the write position no longer count. Replay reads records in order
//! and stops at the first one that is blank, of another generation, or
//! fails its checksum (a record torn by a power loss, or garbage): what was
//! written before it is kept, nothing after it is trusted.

use std::net::Ipv4Addr;

use super::lease::{ClientKey, Lease, LeaseState, LeaseWrite};

/// Bytes before the first record.
pub const HEADER_LEN: usize = 64;
/// Bytes per record.
pub const RECORD_LEN: usize = 48;
const MAGIC: &[u8; 8] = b"MHLEASEJ";
const VERSION: u32 = 1;
const PUT: u8 = 1;
const DELETE: u8 = 2;

/// CRC-32C (Castagnoli), table-driven.
pub fn crc32c(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0x82F6_3B78
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut c = !0u32;
    for b in data {
        c = TABLE[((c ^ u32::from(*b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

/// The header of a journal starting generation `generation`.
pub fn header(generation: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&generation.to_le_bytes());
    let c = crc32c(&h[..16]);
    h[16..20].copy_from_slice(&c.to_le_bytes());
    h
}

/// The generation a header names; `None` when it is not a valid header.
pub fn read_header(b: &[u8]) -> Option<u32> {
    let h = b.get(..HEADER_LEN)?;
    if &h[..8] != MAGIC || u32_at(h, 8) != VERSION || u32_at(h, 16) != crc32c(&h[..16]) {
        return None;
    }
    Some(u32_at(h, 12))
}

/// Append the record of `w` (generation `generation`) to `out`.
pub fn encode(generation: u32, w: &LeaseWrite, out: &mut Vec<u8>) {
    let mut r = [0u8; RECORD_LEN];
    r[..4].copy_from_slice(&generation.to_le_bytes());
    match w {
        LeaseWrite::Put(l) => {
            r[4] = PUT;
            r[5] = l.state.to_u8();
            r[6..12].copy_from_slice(&l.mac);
            r[12..16].copy_from_slice(&l.ip.octets());
            r[16..24].copy_from_slice(&l.expires.to_le_bytes());
            r[24..40].copy_from_slice(&l.client.0);
        }
        LeaseWrite::Delete(ip) => {
            r[4] = DELETE;
            r[12..16].copy_from_slice(&ip.octets());
        }
    }
    let c = crc32c(&r[..44]);
    r[44..48].copy_from_slice(&c.to_le_bytes());
    out.extend_from_slice(&r);
}

/// Why replay stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The file has no valid header: nothing in it counts.
    NoHeader,
    /// Reached the end of the file.
    End,
    /// A blank slot or a record of an older generation: the write position.
    Blank,
    /// A record failing its checksum or not decodable (torn or corrupt).
    Corrupt,
}

/// What a journal file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replayed {
    pub generation: Option<u32>,
    pub writes: Vec<LeaseWrite>,
    /// Offset where the next record would go.
    pub end: usize,
    pub stop: Stop,
}

fn decode(generation: u32, r: &[u8]) -> Result<Option<LeaseWrite>, Stop> {
    if r.iter().all(|b| *b == 0) {
        return Err(Stop::Blank);
    }
    if u32_at(r, 44) != crc32c(&r[..44]) {
        return Err(Stop::Corrupt);
    }
    if u32_at(r, 0) != generation {
        return Err(Stop::Blank);
    }
    let ip = Ipv4Addr::new(r[12], r[13], r[14], r[15]);
    match r[4] {
        PUT => {
            let mut mac = [0u8; 6];
            mac.copy_from_slice(&r[6..12]);
            let mut e = [0u8; 8];
            e.copy_from_slice(&r[16..24]);
            let mut k = [0u8; 16];
            k.copy_from_slice(&r[24..40]);
            let state = LeaseState::from_u8(r[5]).ok_or(Stop::Corrupt)?;
            Ok(Some(LeaseWrite::Put(Lease {
                ip,
                mac,
                client: ClientKey(k),
                expires: u64::from_le_bytes(e),
                state,
            })))
        }
        DELETE => Ok(Some(LeaseWrite::Delete(ip))),
        _ => Err(Stop::Corrupt),
    }
}

/// Read a journal file's bytes: its generation and the writes it holds, in
/// the order they were made.
pub fn replay(b: &[u8]) -> Replayed {
    let Some(generation) = read_header(b) else {
        return Replayed {
            generation: None,
            writes: Vec::new(),
            end: HEADER_LEN,
            stop: Stop::NoHeader,
        };
    };
    let mut writes = Vec::new();
    let mut at = HEADER_LEN;
    let stop = loop {
        let Some(r) = b.get(at..at + RECORD_LEN) else {
            break Stop::End;
        };
        match decode(generation, r) {
            Ok(Some(w)) => writes.push(w),
            Ok(None) => {}
            Err(s) => break s,
        }
        at += RECORD_LEN;
    };
    Replayed {
        generation: Some(generation),
        writes,
        end: at,
        stop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn put(n: u8) -> LeaseWrite {
        LeaseWrite::Put(Lease {
            ip: Ipv4Addr::new(10, 0, 0, n),
            mac: [2, 0, 0, 0, 0, n],
            client: ClientKey::from_client_id(&[1, 2, 0, 0, 0, 0, n]).unwrap(),
            expires: 1_000_000 + u64::from(n),
            state: LeaseState::Bound,
        })
    }

    /// A preallocated file of `slots` records holding `writes`.
    fn file(generation: u32, writes: &[LeaseWrite], slots: usize) -> Vec<u8> {
        let mut b = header(generation).to_vec();
        for w in writes {
            encode(generation, w, &mut b);
        }
        b.resize(HEADER_LEN + slots * RECORD_LEN, 0);
        b
    }

    #[test]
    fn crc32c_known_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn replays_in_order_up_to_the_write_position() {
        let w = vec![
            put(1),
            LeaseWrite::Delete(Ipv4Addr::new(10, 0, 0, 1)),
            put(2),
        ];
        let r = replay(&file(7, &w, 10));
        assert_eq!(r.generation, Some(7));
        assert_eq!(r.writes, w);
        assert_eq!(r.stop, Stop::Blank);
        assert_eq!(r.end, HEADER_LEN + 3 * RECORD_LEN);
        let full = replay(&file(7, &w, 3));
        assert_eq!((full.writes.len(), full.stop), (3, Stop::End));
    }

    #[test]
    fn torn_last_record_is_dropped_and_earlier_ones_kept() {
        let mut b = file(3, &[put(1), put(2), put(3)], 5);
        // A power loss tore the third record: half of it reached the disk.
        let third = HEADER_LEN + 2 * RECORD_LEN;
        for x in &mut b[third + 20..third + RECORD_LEN] {
            *x = 0;
        }
        let r = replay(&b);
        assert_eq!(r.writes, vec![put(1), put(2)]);
        assert_eq!(r.stop, Stop::Corrupt);
        assert_eq!(r.end, third);
        // A torn tail cut at the end of the file.
        let r = replay(&b[..third + 10]);
        assert_eq!((r.writes.len(), r.stop), (2, Stop::End));
    }

    #[test]
    fn flipped_bit_stops_replay_there() {
        let mut b = file(3, &[put(1), put(2), put(3)], 3);
        b[HEADER_LEN + RECORD_LEN + 7] ^= 0x10;
        let r = replay(&b);
        assert_eq!(r.writes, vec![put(1)]);
        assert_eq!(r.stop, Stop::Corrupt);
    }

    #[test]
    fn records_of_an_older_generation_do_not_count() {
        // Generation 4 reused a file that held three records of generation 3.
        let mut b = file(3, &[put(1), put(2), put(3)], 4);
        b[..HEADER_LEN].copy_from_slice(&header(4));
        let mut one = Vec::new();
        encode(4, &put(9), &mut one);
        b[HEADER_LEN..HEADER_LEN + RECORD_LEN].copy_from_slice(&one);
        let r = replay(&b);
        assert_eq!(r.writes, vec![put(9)]);
        assert_eq!(r.stop, Stop::Blank);
    }

    #[test]
    fn bad_header_means_empty() {
        let mut b = file(3, &[put(1)], 2);
        b[13] ^= 1;
        let r = replay(&b);
        assert_eq!(
            (r.generation, r.stop, r.writes.len()),
            (None, Stop::NoHeader, 0)
        );
        assert_eq!(replay(&[]).stop, Stop::NoHeader);
    }

    proptest! {
        #[test]
        fn any_bytes_replay_without_panic(b in proptest::collection::vec(any::<u8>(), 0..600)) {
            let r = replay(&b);
            prop_assert!(r.end <= b.len().max(HEADER_LEN));
        }

        #[test]
        fn any_garbage_after_valid_records_keeps_them(
            n in 0u8..20,
            junk in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let w: Vec<LeaseWrite> = (0..n).map(put).collect();
            let mut b = file(11, &w, usize::from(n));
            b.extend_from_slice(&junk);
            let r = replay(&b);
            prop_assert_eq!(&r.writes[..usize::from(n)], &w[..]);
        }
    }
}
