//! FRU inventory parsing (Platform Management FRU Information Storage
//! Definition v1.0): common header, board info area and product info
//! area, with their type/length encoded fields. Pure; every offset is
//! checked against the image.

use super::error::IpmiError;

/// Strings from the board and product areas.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FruInfo {
    pub board_manufacturer: Option<String>,
    pub board_product: Option<String>,
    pub board_serial: Option<String>,
    pub product_manufacturer: Option<String>,
    pub product_name: Option<String>,
    pub product_part: Option<String>,
    pub product_serial: Option<String>,
}

fn bad(detail: impl Into<String>) -> IpmiError {
    IpmiError::Malformed {
        what: "FRU",
        detail: detail.into(),
    }
}

fn zero_sum(b: &[u8]) -> bool {
    b.iter().fold(0u8, |a, x| a.wrapping_add(*x)) == 0
}

/// Where the areas are, from the 8-byte common header.
pub fn area_offsets(header: &[u8]) -> Result<(Option<usize>, Option<usize>), IpmiError> {
    let h = header.get(..8).ok_or(IpmiError::Truncated {
        what: "FRU header",
        need: 8,
        got: header.len(),
    })?;
    if h[0] & 0x0f != 0x01 {
        return Err(bad(format!("header version {:#04x}", h[0])));
    }
    if !zero_sum(h) {
        return Err(IpmiError::BadChecksum("FRU header"));
    }
    let off = |b: u8| (b != 0).then_some(b as usize * 8);
    Ok((off(h[3]), off(h[4])))
}

/// Decode one type/length field; None at the end marker (0xC1).
fn field(b: &[u8], pos: &mut usize) -> Result<Option<Option<String>>, IpmiError> {
    let tl = *b
        .get(*pos)
        .ok_or_else(|| bad("area ends without end marker"))?;
    if tl == 0xc1 {
        return Ok(None);
    }
    let len = (tl & 0x3f) as usize;
    let raw = b
        .get(*pos + 1..*pos + 1 + len)
        .ok_or_else(|| bad("field runs past its area"))?;
    *pos += 1 + len;
    let s = match tl >> 6 {
        0b00 => hex::encode(raw),
        0b01 => raw
            .iter()
            .flat_map(|x| [x >> 4, x & 0x0f])
            .map(|n| match n {
                0..=9 => char::from(b'0' + n),
                0x0a => ' ',
                0x0b => '-',
                0x0c => '.',
                _ => '?',
            })
            .collect(),
        0b10 => {
            // 6-bit ASCII packed, 4 characters in 3 bytes, LSB first.
            let mut out = String::new();
            for chunk in raw.chunks(3) {
                let mut v: u32 = 0;
                for (i, x) in chunk.iter().enumerate() {
                    v |= (*x as u32) << (8 * i);
                }
                for i in 0..(chunk.len() * 8 / 6) {
                    out.push(char::from(((v >> (6 * i)) & 0x3f) as u8 + 0x20));
                }
            }
            out
        }
        _ => String::from_utf8_lossy(raw).into_owned(),
    };
    let s = s.trim().trim_end_matches('\0').to_string();
    Ok(Some((!s.is_empty()).then_some(s)))
}

/// Length in bytes of the area starting at `b[0]` (byte 1 × 8).
pub fn area_len(b: &[u8]) -> Result<usize, IpmiError> {
    let n = *b.get(1).ok_or(IpmiError::Truncated {
        what: "FRU area",
        need: 2,
        got: b.len(),
    })? as usize
        * 8;
    if n < 8 {
        return Err(bad("area length 0"));
    }
    Ok(n)
}

fn area_fields(b: &[u8], skip: usize, max: usize) -> Result<Vec<Option<String>>, IpmiError> {
    let len = area_len(b)?;
    let a = b.get(..len).ok_or(IpmiError::Truncated {
        what: "FRU area",
        need: len,
        got: b.len(),
    })?;
    if !zero_sum(a) {
        return Err(IpmiError::BadChecksum("FRU area"));
    }
    let mut pos = skip;
    let mut out = Vec::new();
    while out.len() < max {
        match field(a, &mut pos)? {
            Some(f) => out.push(f),
            None => break,
        }
    }
    Ok(out)
}

/// Parse the board area (at its offset): manufacturer, product, serial.
pub fn parse_board(b: &[u8]) -> Result<[Option<String>; 3], IpmiError> {
    // version, length, language, 3 bytes of manufacturing date.
    let f = area_fields(b, 6, 3)?;
    let g = |i: usize| f.get(i).cloned().flatten();
    Ok([g(0), g(1), g(2)])
}

/// Parse the product area: manufacturer, name, part/model, version, serial.
pub fn parse_product(b: &[u8]) -> Result<[Option<String>; 4], IpmiError> {
    let f = area_fields(b, 3, 5)?;
    let g = |i: usize| f.get(i).cloned().flatten();
    Ok([g(0), g(1), g(2), g(4)])
}

/// Parse a whole FRU image.
pub fn parse(image: &[u8]) -> Result<FruInfo, IpmiError> {
    let (board, product) = area_offsets(image)?;
    let mut info = FruInfo::default();
    if let Some(o) = board {
        let a = image
            .get(o..)
            .ok_or_else(|| bad("board area offset past the end"))?;
        let [m, p, s] = parse_board(a)?;
        info.board_manufacturer = m;
        info.board_product = p;
        info.board_serial = s;
    }
    if let Some(o) = product {
        let a = image
            .get(o..)
            .ok_or_else(|| bad("product area offset past the end"))?;
        let [m, n, part, s] = parse_product(a)?;
        info.product_manufacturer = m;
        info.product_name = n;
        info.product_part = part;
        info.product_serial = s;
    }
    Ok(info)
}
