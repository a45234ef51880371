//! Firmware version ranges for quirk matches: comma-separated comparisons
//! (`>=4.0, <4.40`; a bare version means `=`). Versions compare part by
//! part (split at `.`, `-`, `_`, space): numbers as numbers, other parts as
//! case-insensitive text, and a version that runs out of parts is the
//! smaller (`4.4` < `4.4.1`). Vendor strings like `2.86.86.86 (Build 12)`
//! or `U46 v2.70` therefore compare as operators read them.

use std::cmp::Ordering;
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Bound {
    op: Op,
    version: String,
}

/// Why a firmware version range does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VersionRangeError {
    /// A comparison with nothing in it (an empty range, two commas in a row).
    #[error("empty comparison in {range:?}")]
    EmptyComparison { range: String },
    /// A comparison without a version (an operator alone, or separators only).
    #[error("{comparison:?} names no version (write e.g. \">=4.0, <4.40\")")]
    NoVersion { comparison: String },
    #[error("{comparison:?} has two operators")]
    TwoOperators { comparison: String },
}

/// A firmware version range, as written in the config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionRange {
    text: String,
    bounds: Vec<Bound>,
}

impl VersionRange {
    pub fn parse(text: &str) -> Result<VersionRange, VersionRangeError> {
        let mut bounds = Vec::new();
        for part in text.split(',') {
            let p = part.trim();
            if p.is_empty() {
                return Err(VersionRangeError::EmptyComparison {
                    range: text.to_string(),
                });
            }
            let (op, rest) = if let Some(r) = p.strip_prefix(">=") {
                (Op::Ge, r)
            } else if let Some(r) = p.strip_prefix("<=") {
                (Op::Le, r)
            } else if let Some(r) = p.strip_prefix('>') {
                (Op::Gt, r)
            } else if let Some(r) = p.strip_prefix('<') {
                (Op::Lt, r)
            } else if let Some(r) = p.strip_prefix('=') {
                (Op::Eq, r)
            } else {
                (Op::Eq, p)
            };
            let version = rest.trim();
            if version.is_empty() || parts(version).next().is_none() {
                return Err(VersionRangeError::NoVersion {
                    comparison: p.to_string(),
                });
            }
            if version.starts_with(['<', '>', '=']) {
                return Err(VersionRangeError::TwoOperators {
                    comparison: p.to_string(),
                });
            }
            bounds.push(Bound {
                op,
                version: version.to_string(),
            });
        }
        Ok(VersionRange {
            text: text.trim().to_string(),
            bounds,
        })
    }

    /// Whether `version` lies in the range.
    pub fn contains(&self, version: &str) -> bool {
        self.bounds.iter().all(|b| {
            let c = compare(version, &b.version);
            match b.op {
                Op::Lt => c == Ordering::Less,
                Op::Le => c != Ordering::Greater,
                Op::Gt => c == Ordering::Greater,
                Op::Ge => c != Ordering::Less,
                Op::Eq => c == Ordering::Equal,
            }
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl serde::Serialize for VersionRange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

fn parts(v: &str) -> impl Iterator<Item = &str> {
    v.split(['.', '-', '_', ' ', '(', ')'])
        .filter(|p| !p.is_empty())
}

/// Compare two version strings part by part.
pub fn compare(a: &str, b: &str) -> Ordering {
    let mut pa = parts(a);
    let mut pb = parts(b);
    loop {
        match (pa.next(), pb.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let c = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(n), Ok(m)) => n.cmp(&m),
                    _ => x.to_ascii_lowercase().cmp(&y.to_ascii_lowercase()),
                };
                if c != Ordering::Equal {
                    return c;
                }
            }
        }
    }
}
