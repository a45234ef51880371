//! Ignition fragments from a MachineClass, merged with Ignition's own
//! `ignition.config.merge`: an inline fragment is parsed and checked here,
//! then embedded as a `data:` URL; a fragment from a URL must be pinned by
//! its digest. metalherd never merges JSON itself, so the result is exactly
//! what Ignition's documented merge rules produce. Pure.

use serde_json::Value;

use crate::api::MachineClass;

use super::error::RenderError;
use super::render::artifact_hash;
use super::spec::Resource;
use super::templates::check_url;

/// Spec versions a fragment may carry: the same major version, no newer
/// than what we emit.
const MERGEABLE: [&str; 4] = ["3.0.0", "3.1.0", "3.2.0", "3.3.0"];

/// Parse an inline fragment; returns it as compact JSON.
pub fn parse_fragment(field: &str, text: &str) -> Result<String, RenderError> {
    let fail = |reason: String| RenderError::Fragment {
        field: field.to_string(),
        reason,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| fail(e.to_string()))?;
    let Some(obj) = v.as_object() else {
        return Err(fail("expected a JSON object (an Ignition config)".into()));
    };
    let version = obj
        .get("ignition")
        .and_then(|i| i.get("version"))
        .and_then(Value::as_str)
        .ok_or_else(|| fail("missing ignition.version".into()))?;
    if !MERGEABLE.contains(&version) {
        return Err(fail(format!(
            "ignition.version {version:?} cannot be merged into a 3.3.0 config (use 3.0.0 to 3.3.0)"
        )));
    }
    serde_json::to_string(&v).map_err(|e| fail(e.to_string()))
}

/// The class's fragments as `ignition.config.merge` entries, in order.
pub fn fragments(class: &MachineClass) -> Result<Vec<Resource>, RenderError> {
    let mut out = Vec::new();
    for (i, f) in class.spec.ignition_fragments.iter().enumerate() {
        let field = format!("spec.ignitionFragments[{i}]");
        match (&f.inline, &f.source) {
            (Some(text), None) => {
                let json = parse_fragment(&format!("{field}.inline"), text)?;
                out.push(Resource::data(json.as_bytes()));
            }
            (None, Some(a)) => {
                let sf = format!("{field}.source");
                check_url(&format!("{sf}.url"), &a.url)?;
                let Some(hash) = artifact_hash(&sf, a)? else {
                    return Err(RenderError::invalid(
                        format!("{sf}.sha512"),
                        "a fragment fetched from a URL must be pinned by its sha512",
                    ));
                };
                out.push(Resource::remote(&a.url, Some(hash)));
            }
            _ => {
                return Err(RenderError::invalid(
                    field,
                    "set exactly one of inline and source",
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_fragment_is_compacted() {
        let s = parse_fragment("f", "{ \"ignition\": {\"version\": \"3.2.0\"} }").unwrap();
        assert_eq!(s, r#"{"ignition":{"version":"3.2.0"}}"#);
    }

    #[test]
    fn broken_fragments_name_their_field() {
        for bad in ["{", "[]", "{}", r#"{"ignition":{"version":"2.2.0"}}"#] {
            let e = parse_fragment("spec.ignitionFragments[0].inline", bad).unwrap_err();
            assert_eq!(
                e.field(),
                Some("spec.ignitionFragments[0].inline"),
                "{bad}: {e}"
            );
        }
    }
}
