//! [`MacAddr`]: the one place a hardware address is parsed and written.
//! The canonical form (status, logs, Ignition) is lower-case with colons;
//! the hyphenated form is what iPXE's `${mac:hexhyp}` gives and what boot
//! URLs carry. Parsing accepts either separator, any case.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 48-bit hardware address.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

/// Why a string is not a MAC address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a MAC address (expected aa:bb:cc:dd:ee:ff)")]
pub struct MacParseError;

impl MacAddr {
    /// The six octets.
    pub fn octets(self) -> [u8; 6] {
        self.0
    }

    /// `aa-bb-cc-dd-ee-ff`.
    pub fn hyphenated(self) -> String {
        self.joined('-')
    }

    fn joined(self, sep: char) -> String {
        let mut s = String::with_capacity(17);
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                s.push(sep);
            }
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}

impl From<[u8; 6]> for MacAddr {
    fn from(b: [u8; 6]) -> MacAddr {
        MacAddr(b)
    }
}

impl From<MacAddr> for [u8; 6] {
    fn from(m: MacAddr) -> [u8; 6] {
        m.0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.joined(':'))
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for MacAddr {
    type Err = MacParseError;

    /// `aa:bb:cc:dd:ee:ff` or `aa-bb-cc-dd-ee-ff`, any case.
    fn from_str(s: &str) -> Result<MacAddr, MacParseError> {
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for o in out.iter_mut() {
            let p = parts.next().ok_or(MacParseError)?;
            if p.len() != 2 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(MacParseError);
            }
            *o = u8::from_str_radix(p, 16).map_err(|_| MacParseError)?;
        }
        if parts.next().is_some() {
            return Err(MacParseError);
        }
        Ok(MacAddr(out))
    }
}

impl Serialize for MacAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MacAddr, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: MacAddr = MacAddr([0xaa, 0xbb, 0xcc, 0, 0x11, 0x22]);

    #[test]
    fn parses_both_separators_any_case() {
        assert_eq!("AA-bb-cc-00-11-22".parse(), Ok(M));
        assert_eq!("aa:BB:cc:00:11:22".parse(), Ok(M));
        assert_eq!("aa:bb:cc:00:11".parse::<MacAddr>(), Err(MacParseError));
        assert_eq!("aa:bb:cc:00:11:2g".parse::<MacAddr>(), Err(MacParseError));
        assert_eq!(
            "aa:bb:cc:00:11:22:33".parse::<MacAddr>(),
            Err(MacParseError)
        );
        assert_eq!("aa:bb:cc:00:11:2".parse::<MacAddr>(), Err(MacParseError));
        assert_eq!("+a:bb:cc:00:11:22".parse::<MacAddr>(), Err(MacParseError));
    }

    #[test]
    fn writes_colon_and_hyphen_forms() {
        assert_eq!(M.to_string(), "aa:bb:cc:00:11:22");
        assert_eq!(M.hyphenated(), "aa-bb-cc-00-11-22");
        assert_eq!(format!("{M:?}"), "aa:bb:cc:00:11:22");
    }

    #[test]
    fn serde_is_the_colon_string() {
        let v = serde_json::to_value(M).unwrap();
        assert_eq!(v, serde_json::json!("aa:bb:cc:00:11:22"));
        let back: MacAddr = serde_json::from_value(serde_json::json!("AA-BB-CC-00-11-22")).unwrap();
        assert_eq!(back, M);
        assert!(serde_json::from_value::<MacAddr>(serde_json::json!("nope")).is_err());
    }
}
