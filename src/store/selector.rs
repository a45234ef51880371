//! Label selectors: the string form (`app=web,tier!=db,env in (a,b),!gpu`,
//! and `gen>3`, `gen<5` on integer values) and the `LabelSelector` object
//! form, evaluated against `metadata.labels`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    /// The label is there and holds an integer greater than this one.
    Gt(String, i64),
    /// The label is there and holds an integer less than this one.
    Lt(String, i64),
}

/// A conjunction of requirements; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector(pub Vec<Requirement>);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct SelectorError {
    pub selector: String,
    pub reason: SelectorReason,
}

/// What is wrong in a selector.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorReason {
    #[error("bad key {0:?}")]
    BadKey(String),
    #[error("bad value {0:?}")]
    BadValue(String),
    #[error("expected a set in parentheses")]
    NotASet,
    #[error("for 'gt', 'lt' operators, the value must be an integer, not {0:?}")]
    NotAnInteger(String),
    #[error("unknown operator {0:?}")]
    UnknownOperator(String),
}

impl Selector {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Parse the string form used by `-l` and `?labelSelector=`.
    pub fn parse(s: &str) -> Result<Selector, SelectorError> {
        let err = |reason| SelectorError {
            selector: s.to_string(),
            reason,
        };
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let req = if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(check_key(k.trim()).map_err(err)?)
            } else if let Some((k, rest)) = split_word(part, " notin ") {
                Requirement::NotIn(check_key(k).map_err(err)?, parse_set(rest).map_err(err)?)
            } else if let Some((k, rest)) = split_word(part, " in ") {
                Requirement::In(check_key(k).map_err(err)?, parse_set(rest).map_err(err)?)
            } else if let Some((k, v)) = part.split_once('>') {
                Requirement::Gt(
                    check_key(k.trim()).map_err(err)?,
                    integer(v.trim()).map_err(err)?,
                )
            } else if let Some((k, v)) = part.split_once('<') {
                Requirement::Lt(
                    check_key(k.trim()).map_err(err)?,
                    integer(v.trim()).map_err(err)?,
                )
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEq(
                    check_key(k.trim()).map_err(err)?,
                    check_value(v.trim()).map_err(err)?,
                )
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Eq(
                    check_key(k.trim()).map_err(err)?,
                    check_value(v.trim()).map_err(err)?,
                )
            } else {
                Requirement::Exists(check_key(part).map_err(err)?)
            };
            reqs.push(req);
        }
        Ok(Selector(reqs))
    }

    /// Convert the object form (MachineSet `spec.selector`).
    pub fn from_label_selector(ls: &LabelSelector) -> Result<Selector, SelectorError> {
        let mut reqs = Vec::new();
        for (k, v) in ls.match_labels.iter().flatten() {
            reqs.push(Requirement::Eq(k.clone(), v.clone()));
        }
        for e in ls.match_expressions.iter().flatten() {
            let vals = e.values.clone().unwrap_or_default();
            reqs.push(match e.operator.as_str() {
                "In" => Requirement::In(e.key.clone(), vals),
                "NotIn" => Requirement::NotIn(e.key.clone(), vals),
                "Exists" => Requirement::Exists(e.key.clone()),
                "DoesNotExist" => Requirement::NotExists(e.key.clone()),
                other => {
                    return Err(SelectorError {
                        selector: format!("{ls:?}"),
                        reason: SelectorReason::UnknownOperator(other.to_string()),
                    });
                }
            });
        }
        Ok(Selector(reqs))
    }

    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Eq(k, v) => labels.get(k) == Some(v),
            Requirement::NotEq(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
            Requirement::Gt(k, n) => int_label(labels, k).is_some_and(|l| l > *n),
            Requirement::Lt(k, n) => int_label(labels, k).is_some_and(|l| l < *n),
        })
    }

    /// Match an object's `metadata.labels`.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let labels: BTreeMap<String, String> = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.matches_labels(&labels)
    }
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|r| match r {
                Requirement::Eq(k, v) => format!("{k}={v}"),
                Requirement::NotEq(k, v) => format!("{k}!={v}"),
                Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                Requirement::Exists(k) => k.clone(),
                Requirement::NotExists(k) => format!("!{k}"),
                Requirement::Gt(k, n) => format!("{k}>{n}"),
                Requirement::Lt(k, n) => format!("{k}<{n}"),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// Split on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn split_word<'a>(s: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    s.find(word)
        .map(|i| (s[..i].trim(), s[i + word.len()..].trim()))
}

fn parse_set(s: &str) -> Result<Vec<String>, SelectorReason> {
    let inner = s
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .ok_or(SelectorReason::NotASet)?;
    inner.split(',').map(|v| check_value(v.trim())).collect()
}

/// The value of `gt`/`lt`: an integer, as kube-apiserver requires.
fn integer(v: &str) -> Result<i64, SelectorReason> {
    v.parse()
        .map_err(|_| SelectorReason::NotAnInteger(v.to_string()))
}

/// A label's value as an integer; a label that is not one matches neither
/// `gt` nor `lt`.
fn int_label(labels: &BTreeMap<String, String>, k: &str) -> Option<i64> {
    labels.get(k)?.parse().ok()
}

fn check_key(k: &str) -> Result<String, SelectorReason> {
    let ok = !k.is_empty()
        && k.len() <= 317
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'));
    if ok {
        Ok(k.to_string())
    } else {
        Err(SelectorReason::BadKey(k.to_string()))
    }
}

fn check_value(v: &str) -> Result<String, SelectorReason> {
    let ok = v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(v.to_string())
    } else {
        Err(SelectorReason::BadValue(v.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parse_and_match() {
        let s = Selector::parse("rack=r1,role!=cp,env in (a, b),!gpu,zone").unwrap();
        assert_eq!(s.0.len(), 5);
        assert!(s.matches_labels(&labels(&[("rack", "r1"), ("env", "a"), ("zone", "z")])));
        assert!(!s.matches_labels(&labels(&[("rack", "r1"), ("env", "c"), ("zone", "z")])));
        assert!(!s.matches_labels(&labels(&[
            ("rack", "r1"),
            ("env", "a"),
            ("zone", "z"),
            ("gpu", "1")
        ])));
        assert_eq!(Selector::parse("").unwrap(), Selector::default());
        let s = Selector::parse("gen>3,gen<5").unwrap();
        assert!(s.matches_labels(&labels(&[("gen", "4")])));
        assert!(!s.matches_labels(&labels(&[("gen", "5")])));
        assert!(!s.matches_labels(&labels(&[("gen", "x")])));
        assert!(!s.matches_labels(&labels(&[])));
        assert_eq!(s.to_string(), "gen>3,gen<5");
    }

    #[test]
    fn bad_selectors_are_errors() {
        assert!(Selector::parse("a in b").is_err());
        assert!(Selector::parse("a=b c").is_err());
        assert!(Selector::parse("=x").is_err());
        assert!(Selector::parse("gen>x").is_err());
        assert_eq!(
            Selector::parse("a in b").unwrap_err().to_string(),
            r#"invalid label selector "a in b": expected a set in parentheses"#
        );
        assert_eq!(
            Selector::parse("gen>x").unwrap_err().reason,
            SelectorReason::NotAnInteger("x".into())
        );
    }
}
