//! A copy of a rendered config with every secret value (the join token, the
//! per-boot token) replaced by `<redacted>`: what `metalherd render` prints
//! by default and what may be logged or shown. Secrets inside `data:` URLs
//! are found by decoding them (recursively: the install config embeds the
//! node config), so the redacted view is still a valid config. Pure.

use serde_json::Value;

use super::spec::{Config, data_url, decode_data_url};

pub const REDACTED: &str = "<redacted>";

/// `config` with each of `secrets` (non-empty values) replaced.
pub fn redact(config: &Config, secrets: &[&str]) -> Config {
    let secrets: Vec<&str> = secrets.iter().copied().filter(|s| !s.is_empty()).collect();
    let Ok(mut v) = serde_json::to_value(config) else {
        return Config::new();
    };
    redact_value(&mut v, &secrets);
    // Only strings changed, so the shape still fits `Config`.
    serde_json::from_value(v).unwrap_or_else(|_| Config::new())
}

fn redact_value(v: &mut Value, secrets: &[&str]) {
    match v {
        Value::String(s) => {
            if let Some(r) = redact_str(s, secrets) {
                *s = r;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| redact_value(x, secrets)),
        Value::Object(o) => o.values_mut().for_each(|x| redact_value(x, secrets)),
        _ => {}
    }
}

/// The redacted form of `s`, or `None` when it holds no secret.
fn redact_str(s: &str, secrets: &[&str]) -> Option<String> {
    if s.starts_with("data:")
        && let Some(bytes) = decode_data_url(s)
    {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        // An embedded Ignition config: redact inside it, keep it a config.
        let inner = match serde_json::from_str::<Value>(&text) {
            Ok(mut j) if j.is_object() => {
                let before = j.clone();
                redact_value(&mut j, secrets);
                (j != before).then(|| j.to_string())
            }
            _ => replace_all(&text, secrets),
        };
        return inner.map(|t| data_url(t.as_bytes()));
    }
    replace_all(s, secrets)
}

fn replace_all(s: &str, secrets: &[&str]) -> Option<String> {
    if !secrets.iter().any(|x| s.contains(x)) {
        return None;
    }
    let mut out = s.to_string();
    for x in secrets {
        out = out.replace(x, REDACTED);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ignition::spec::File;

    #[test]
    fn redacts_plain_and_nested_data_urls() {
        let token = "abcdef.0123456789abcdef";
        let mut inner = Config::new();
        inner.add_file(File::text(
            "/etc/x",
            0o600,
            &format!("token: \"{token}\"\n"),
        ));
        let inner_json = serde_json::to_string(&inner).unwrap();
        let mut outer = Config::new();
        outer.add_file(File::text("/etc/node.ign", 0o600, &inner_json));
        outer.add_file(File::text("/etc/y", 0o600, &format!("T={token}")));
        let r = redact(&outer, &[token]);
        let s = serde_json::to_string(&r).unwrap();
        assert!(!s.contains(token));
        assert!(!s.contains("0123456789abcdef"));
        assert!(s.contains("%3Credacted%3E"));
        // Unchanged strings stay byte-identical.
        assert_eq!(r.storage.as_ref().unwrap().files[0].path, "/etc/node.ign");
    }
}
