//! HTTP conditional and range decisions for static files (RFC 9110): a
//! single byte range (206 / 416), `If-None-Match` (304) and `If-Range`.
//! Pure functions over header values; no files here.

/// What to send for a `Range` header against a body of `len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeDecision {
    /// The whole body (no range, an unparsable one, several ranges, or an
    /// `If-Range` that no longer matches: RFC 9110 lets a server ignore it).
    Full,
    /// Bytes `start..=end`.
    Partial { start: u64, end: u64 },
    /// 416 with `Content-Range: bytes */len`.
    Unsatisfiable,
}

/// Decide on one `Range` header value.
pub fn decide(range: Option<&str>, len: u64) -> RangeDecision {
    let Some(r) = range else {
        return RangeDecision::Full;
    };
    let Some(spec) = r.trim().strip_prefix("bytes=") else {
        return RangeDecision::Full;
    };
    if spec.contains(',') {
        return RangeDecision::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return RangeDecision::Full;
    };
    let (a, b) = (a.trim(), b.trim());
    let num = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
            None
        } else {
            s.parse().ok()
        }
    };
    if a.is_empty() {
        // Suffix range: the last n bytes.
        let Some(n) = num(b) else {
            return RangeDecision::Full;
        };
        if n == 0 || len == 0 {
            return RangeDecision::Unsatisfiable;
        }
        return RangeDecision::Partial {
            start: len.saturating_sub(n),
            end: len - 1,
        };
    }
    let Some(start) = num(a) else {
        return RangeDecision::Full;
    };
    let end = if b.is_empty() {
        None
    } else {
        match num(b) {
            Some(e) if e >= start => Some(e),
            _ => return RangeDecision::Full,
        }
    };
    if start >= len {
        return RangeDecision::Unsatisfiable;
    }
    let end = end.map_or(len - 1, |e| e.min(len - 1));
    RangeDecision::Partial { start, end }
}

/// Whether an `If-None-Match` value matches `etag` (weak comparison).
pub fn none_match(if_none_match: &str, etag: &str) -> bool {
    let bare = |t: &str| t.trim().trim_start_matches("W/").to_string();
    let mine = bare(etag);
    if_none_match
        .split(',')
        .any(|t| t.trim() == "*" || bare(t) == mine)
}

/// Whether an `If-Range` value still allows the range (strong comparison;
/// dates are not used, so only an identical ETag counts).
pub fn if_range_ok(if_range: Option<&str>, etag: &str) -> bool {
    match if_range {
        None => true,
        Some(v) => !v.trim().starts_with("W/") && v.trim() == etag,
    }
}

#[cfg(test)]
mod tests {
    use super::RangeDecision::*;
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(decide(None, 10), Full);
        assert_eq!(decide(Some("bytes=0-3"), 10), Partial { start: 0, end: 3 });
        assert_eq!(decide(Some("bytes=5-"), 10), Partial { start: 5, end: 9 });
        assert_eq!(decide(Some("bytes=-3"), 10), Partial { start: 7, end: 9 });
        assert_eq!(decide(Some("bytes=-30"), 10), Partial { start: 0, end: 9 });
        assert_eq!(
            decide(Some("bytes=8-100"), 10),
            Partial { start: 8, end: 9 }
        );
        assert_eq!(decide(Some("bytes=10-"), 10), Unsatisfiable);
        assert_eq!(decide(Some("bytes=-0"), 10), Unsatisfiable);
        assert_eq!(decide(Some("bytes=0-"), 0), Unsatisfiable);
        assert_eq!(decide(Some("bytes=3-1"), 10), Full);
        assert_eq!(decide(Some("bytes=0-1,3-4"), 10), Full);
        assert_eq!(decide(Some("items=0-1"), 10), Full);
        assert_eq!(decide(Some("bytes=a-b"), 10), Full);
        assert_eq!(decide(Some("bytes=+1-2"), 10), Full);
        assert_eq!(decide(Some("bytes=99999999999999999999999-"), 10), Full);
    }

    #[test]
    fn conditionals() {
        assert!(none_match("\"a\"", "\"a\""));
        assert!(none_match("W/\"a\", \"b\"", "\"a\""));
        assert!(none_match("*", "\"a\""));
        assert!(!none_match("\"b\"", "\"a\""));
        assert!(if_range_ok(None, "\"a\""));
        assert!(if_range_ok(Some("\"a\""), "\"a\""));
        assert!(!if_range_ok(Some("\"b\""), "\"a\""));
        assert!(!if_range_ok(Some("W/\"a\""), "\"a\""));
    }

    proptest::proptest! {
        #[test]
        fn partial_is_inside_the_body(s in "\\PC{0,24}", len in 0u64..1000) {
            if let Partial { start, end } = decide(Some(&s), len) {
                proptest::prop_assert!(start <= end && end < len);
            }
        }
    }
}
