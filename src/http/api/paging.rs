//! List paging (`?limit=` and `?continue=`), as kube-apiserver pages: items
//! in key order (namespace, then name), at most `limit` per page, and a
//! `continue` token to ask for the rest. The token names the list's
//! resourceVersion and the last key served.
//!
//! kube-apiserver serves every page from the snapshot of the first (until
//! etcd compacts it). This server keeps no snapshots: a token is honoured
//! while the store is still at the version of the first page, and answered
//! `410 Expired` once anything changed, as kube-apiserver answers a token
//! older than its compaction. Pagers then list again in full (client-go's
//! and kube-rs' do).

use axum::http::StatusCode;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ApiError;
use crate::store::key_of;

#[derive(Serialize, Deserialize)]
struct Token {
    /// The list's resourceVersion.
    rv: String,
    /// The last key served: `namespace/name`.
    start: String,
}

/// One page of a list.
#[derive(Debug, PartialEq)]
pub struct Page {
    pub items: Vec<Value>,
    /// The token for the next page, when there is one.
    pub next: Option<String>,
    /// How many items follow this page.
    pub remaining: usize,
}

fn key(v: &Value) -> String {
    let (ns, name) = key_of(v);
    format!("{ns}/{name}")
}

/// The page `limit` and `continue_token` ask for of `items`, listed at
/// `list_rv`. A `limit` of 0 or none means everything.
pub fn page(
    mut items: Vec<Value>,
    list_rv: &str,
    limit: Option<usize>,
    continue_token: Option<&str>,
) -> Result<Page, ApiError> {
    items.sort_by_cached_key(key);
    if let Some(token) = continue_token.filter(|t| !t.is_empty()) {
        let t = decode(token)?;
        if t.rv != list_rv {
            return Err(ApiError::new(
                StatusCode::GONE,
                "Expired",
                "The provided continue parameter is too old to display a consistent list result. \
                 You can start a new list without the continue parameter.",
            ));
        }
        items.retain(|v| key(v) > t.start);
    }
    let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    if items.len() <= limit {
        return Ok(Page {
            items,
            next: None,
            remaining: 0,
        });
    }
    let rest = items.split_off(limit);
    let start = items.last().map(key).unwrap_or_default();
    let next = encode(&Token {
        rv: list_rv.to_string(),
        start,
    });
    Ok(Page {
        items,
        next: Some(next),
        remaining: rest.len(),
    })
}

fn encode(t: &Token) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(t).unwrap_or_default())
}

fn decode(token: &str) -> Result<Token, ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "invalid continue token: continue key is not valid: {token:?}"
        ))
    };
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    serde_json::from_slice(&bytes).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(ns: &str, name: &str) -> Value {
        json!({"kind": "Secret", "metadata": {"namespace": ns, "name": name}})
    }

    fn names(p: &Page) -> Vec<&str> {
        p.items
            .iter()
            .map(|v| v["metadata"]["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn pages_in_key_order_until_the_last_has_no_token() {
        let items = vec![obj("b", "x"), obj("a", "z"), obj("a", "y")];
        let first = page(items.clone(), "9", Some(2), None).unwrap();
        assert_eq!(names(&first), ["y", "z"]);
        assert_eq!(first.remaining, 1);
        let next = first.next.unwrap();
        let second = page(items.clone(), "9", Some(2), Some(&next)).unwrap();
        assert_eq!(names(&second), ["x"]);
        assert_eq!(second.next, None);
        let all = page(items, "9", Some(0), None).unwrap();
        assert_eq!(all.items.len(), 3);
        assert_eq!(all.next, None);
    }

    #[test]
    fn a_token_from_another_version_expires_and_a_forged_one_is_refused() {
        let items = vec![obj("a", "1"), obj("a", "2")];
        let next = page(items.clone(), "9", Some(1), None)
            .unwrap()
            .next
            .unwrap();
        let e = page(items.clone(), "10", Some(1), Some(&next)).unwrap_err();
        assert_eq!(e.code, StatusCode::GONE);
        for forged in ["%%%", "bm90IGpzb24"] {
            let e = page(items.clone(), "9", Some(1), Some(forged)).unwrap_err();
            assert_eq!(e.code, StatusCode::BAD_REQUEST, "{forged}");
        }
    }
}
