//! The on-disk format of DHCPv6 leases: a snapshot file (every lease at
//! one generation) and a journal (every change since, appended before the
//! reply that depends on it). Both are a 64-byte header (magic, version,
//! generation, CRC-32C) then fixed 96-byte records, each with its
//! generation and a CRC-32C. Pure: encodes into buffers and reads bytes
//! back; `lease_store` does the file I/O.
//!
//! Replay reads journal records in order and stops at the first that is
//! blank, of another generation, or fails its checksum (a record torn by a
//! power loss, or garbage): what came before it is kept, nothing after it
//! is trusted. A journal counts only when its generation is the
//! snapshot's; a newer snapshot already holds everything an older
//! journal said.

use std::collections::HashMap;
use std::net::Ipv6Addr;

use super::lease::{Lease6, LeaseWrite6, State6};
use crate::dhcp::journal::crc32c;
use crate::dhcp::lease::ClientKey;

pub const HEADER_LEN: usize = 64;
pub const RECORD_LEN: usize = 96;
pub const SNAPSHOT_MAGIC: &[u8; 8] = b"MHL6SNAP";
pub const JOURNAL_MAGIC: &[u8; 8] = b"MHL6JRNL";
const VERSION: u32 = 1;
const PUT: u8 = 1;
const DELETE: u8 = 2;

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

fn key_at(b: &[u8], at: usize) -> ClientKey {
    let mut k = [0u8; 16];
    if let Some(s) = b.get(at..at + 16) {
        k.copy_from_slice(s);
    }
    ClientKey(k)
}

/// A header for a file of kind `magic` at `generation`.
pub fn header(magic: &[u8; 8], generation: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(magic);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&generation.to_le_bytes());
    let c = crc32c(&h[..16]);
    h[16..20].copy_from_slice(&c.to_le_bytes());
    h
}

/// The generation a header of kind `magic` names; `None` when invalid.
pub fn read_header(magic: &[u8; 8], b: &[u8]) -> Option<u32> {
    let h = b.get(..HEADER_LEN)?;
    if &h[..8] != magic || u32_at(h, 8) != VERSION || u32_at(h, 16) != crc32c(&h[..16]) {
        return None;
    }
    Some(u32_at(h, 12))
}

/// Append the record of `w` at `generation` to `out`.
pub fn encode(generation: u32, w: &LeaseWrite6, out: &mut Vec<u8>) {
    let mut r = [0u8; RECORD_LEN];
    r[..4].copy_from_slice(&generation.to_le_bytes());
    match w {
        LeaseWrite6::Put(l) => {
            r[4] = PUT;
            r[5] = l.state.to_u8();
            r[6] = u8::from(l.mac.is_some()) | (u8::from(l.boot) << 1);
            r[8..14].copy_from_slice(&l.mac.unwrap_or_default());
            r[16..32].copy_from_slice(&l.addr.octets());
            r[32..40].copy_from_slice(&l.expires.to_le_bytes());
            r[40..56].copy_from_slice(&l.owner.0);
            r[56..72].copy_from_slice(&l.duid.0);
            r[72..76].copy_from_slice(&l.iaid.to_le_bytes());
        }
        LeaseWrite6::Delete(a) => {
            r[4] = DELETE;
            r[16..32].copy_from_slice(&a.octets());
        }
    }
    let c = crc32c(&r[..RECORD_LEN - 4]);
    r[RECORD_LEN - 4..].copy_from_slice(&c.to_le_bytes());
    out.extend_from_slice(&r);
}

/// Why reading stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    NoHeader,
    End,
    /// A blank slot or a record of another generation.
    Blank,
    /// A record failing its checksum or not decodable (torn or corrupt).
    Corrupt,
}

fn decode(generation: u32, r: &[u8]) -> Result<LeaseWrite6, Stop> {
    if r.iter().all(|b| *b == 0) {
        return Err(Stop::Blank);
    }
    if u32_at(r, RECORD_LEN - 4) != crc32c(&r[..RECORD_LEN - 4]) {
        return Err(Stop::Corrupt);
    }
    if u32_at(r, 0) != generation {
        return Err(Stop::Blank);
    }
    let mut a = [0u8; 16];
    a.copy_from_slice(&r[16..32]);
    let addr = Ipv6Addr::from(a);
    match r[4] {
        PUT => {
            let mut mac = [0u8; 6];
            mac.copy_from_slice(&r[8..14]);
            let mut e = [0u8; 8];
            e.copy_from_slice(&r[32..40]);
            Ok(LeaseWrite6::Put(Lease6 {
                addr,
                owner: key_at(r, 40),
                iaid: u32_at(r, 72),
                duid: key_at(r, 56),
                mac: (r[6] & 1 == 1).then_some(mac),
                boot: r[6] & 2 == 2,
                expires: u64::from_le_bytes(e),
                state: State6::from_u8(r[5]).ok_or(Stop::Corrupt)?,
            }))
        }
        DELETE => Ok(LeaseWrite6::Delete(addr)),
        _ => Err(Stop::Corrupt),
    }
}

/// What a file of kind `magic` holds: its generation, its records in
/// order (up to the first bad one), the offset after them, and why
/// reading stopped.
pub fn replay(magic: &[u8; 8], b: &[u8]) -> (Option<u32>, Vec<LeaseWrite6>, usize, Stop) {
    let Some(g) = read_header(magic, b) else {
        return (None, Vec::new(), HEADER_LEN, Stop::NoHeader);
    };
    let mut out = Vec::new();
    let mut at = HEADER_LEN;
    while let Some(r) = b.get(at..at + RECORD_LEN) {
        match decode(g, r) {
            Ok(w) => out.push(w),
            Err(stop) => return (Some(g), out, at, stop),
        }
        at += RECORD_LEN;
    }
    let stop = if at == b.len() {
        Stop::End
    } else {
        Stop::Corrupt
    };
    (Some(g), out, at, stop)
}

/// A snapshot of `leases` at `generation`.
pub fn snapshot<'a>(generation: u32, leases: impl Iterator<Item = &'a Lease6>) -> Vec<u8> {
    let mut out = header(SNAPSHOT_MAGIC, generation).to_vec();
    for l in leases {
        encode(generation, &LeaseWrite6::Put(*l), &mut out);
    }
    out
}

/// Apply writes to a lease map (recovery).
pub fn apply(map: &mut HashMap<Ipv6Addr, Lease6>, writes: impl IntoIterator<Item = LeaseWrite6>) {
    for w in writes {
        match w {
            LeaseWrite6::Put(l) => {
                map.insert(l.addr, l);
            }
            LeaseWrite6::Delete(a) => {
                map.remove(&a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(n: u16) -> Lease6 {
        Lease6 {
            addr: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, n),
            owner: ClientKey([1; 16]),
            iaid: 0xdead_beef,
            duid: ClientKey([2; 16]),
            mac: Some([0x52, 0x54, 0, 0, 0, 1]),
            boot: true,
            expires: 1_700_000_000,
            state: State6::Bound,
        }
    }

    #[test]
    fn records_read_back_and_replay_stops_at_a_torn_one() {
        let mut b = header(JOURNAL_MAGIC, 7).to_vec();
        let ws = [
            LeaseWrite6::Put(lease(1)),
            LeaseWrite6::Put(Lease6 {
                mac: None,
                boot: false,
                ..lease(2)
            }),
            LeaseWrite6::Delete(lease(1).addr),
        ];
        for w in &ws {
            encode(7, w, &mut b);
        }
        let (g, got, end, stop) = replay(JOURNAL_MAGIC, &b);
        assert_eq!(
            (g, got.as_slice(), end, stop),
            (Some(7), &ws[..], b.len(), Stop::End)
        );
        // A torn last record: the first two count.
        let torn = b.len() - 10;
        b[torn] ^= 0xff;
        let (_, got, end, stop) = replay(JOURNAL_MAGIC, &b);
        assert_eq!((got.len(), stop), (2, Stop::Corrupt));
        assert_eq!(end, HEADER_LEN + 2 * RECORD_LEN);
        // A record of an older generation marks the end.
        let mut old = header(JOURNAL_MAGIC, 8).to_vec();
        encode(7, &ws[0], &mut old);
        assert_eq!(replay(JOURNAL_MAGIC, &old).3, Stop::Blank);
        assert_eq!(replay(SNAPSHOT_MAGIC, &old).3, Stop::NoHeader);
    }

    #[test]
    fn a_snapshot_holds_every_lease() {
        let ls = [lease(1), lease(2)];
        let b = snapshot(3, ls.iter());
        let (g, got, _, stop) = replay(SNAPSHOT_MAGIC, &b);
        assert_eq!((g, stop), (Some(3), Stop::End));
        let mut map = HashMap::new();
        apply(&mut map, got);
        assert_eq!(map.len(), 2);
        assert_eq!(map[&lease(2).addr], lease(2));
    }
}
