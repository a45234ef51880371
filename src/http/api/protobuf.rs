//! Request bodies in Kubernetes' protobuf encoding, for the two kinds
//! kubectl sends that way: `kubectl create namespace` and `kubectl create
//! secret` use client-go's typed clients, which encode built-in kinds as
//! `application/vnd.kubernetes.protobuf` and do not fall back to JSON.
//!
//! The encoding: the magic `k8s\0`, then a `runtime.Unknown` message
//! (`typeMeta` = 1 {`apiVersion` = 1, `kind` = 2}, `raw` = 2 holding the
//! object's own message, `contentEncoding` = 3). Only the fields of
//! `ObjectMeta`, `Namespace` and `Secret` a client sets on create are
//! read (name, generateName, namespace, labels, annotations, finalizers;
//! a Namespace's spec finalizers; a Secret's data, stringData, type,
//! immutable); the rest are skipped. The object comes out as the JSON the
//! API takes. Pure: bytes in, value out; malformed input is an error,
//! never a panic.

use base64::Engine;
use serde_json::{Map, Value, json};

use crate::api::Kind;

/// The prefix of every protobuf-encoded Kubernetes object.
const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufError {
    /// A kind this server does not read protobuf for.
    #[error("protobuf request bodies are read for Namespaces and Secrets only, not {0}s")]
    Unsupported(Kind),
    #[error("malformed protobuf body: {0}")]
    Malformed(String),
}

fn bad<T>(what: impl Into<String>) -> Result<T, ProtobufError> {
    Err(ProtobufError::Malformed(what.into()))
}

/// One field of a message: its number and its value.
#[derive(Debug)]
pub(super) enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// Fixed 32- and 64-bit values: no field read here has one.
    Fixed,
}

/// The fields of one message, in order.
pub(super) fn fields(mut b: &[u8]) -> Result<Vec<(u64, Field<'_>)>, ProtobufError> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b)?;
        let number = key >> 3;
        let field = match key & 7 {
            0 => Field::Varint(varint(&mut b)?),
            1 => {
                b = b
                    .get(8..)
                    .ok_or(ProtobufError::Malformed("truncated fixed64".into()))?;
                Field::Fixed
            }
            2 => {
                let len = usize::try_from(varint(&mut b)?)
                    .map_err(|_| ProtobufError::Malformed("length out of range".into()))?;
                if len > b.len() {
                    return bad("truncated length-delimited field");
                }
                let (v, rest) = b.split_at(len);
                b = rest;
                Field::Bytes(v)
            }
            5 => {
                b = b
                    .get(4..)
                    .ok_or(ProtobufError::Malformed("truncated fixed32".into()))?;
                Field::Fixed
            }
            t => return bad(format!("wire type {t} of field {number}")),
        };
        out.push((number, field));
    }
    Ok(out)
}

fn varint(b: &mut &[u8]) -> Result<u64, ProtobufError> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = b
            .split_first()
            .ok_or(ProtobufError::Malformed("truncated varint".into()))?;
        *b = rest;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    bad("varint longer than 64 bits")
}

fn bytes<'a>(f: &Field<'a>) -> Result<&'a [u8], ProtobufError> {
    match f {
        Field::Bytes(b) => Ok(b),
        _ => bad("expected a length-delimited field"),
    }
}

fn string(f: &Field<'_>) -> Result<String, ProtobufError> {
    String::from_utf8(bytes(f)?.to_vec()).or_else(|_| bad("a string is not UTF-8"))
}

/// One entry of a `map<string, V>`: key = 1, value = 2.
fn entry<'a>(f: &Field<'a>) -> Result<(String, &'a [u8]), ProtobufError> {
    let (mut key, mut value) = (String::new(), &[][..]);
    for (n, f) in fields(bytes(f)?)? {
        match n {
            1 => key = string(&f)?,
            2 => value = bytes(&f)?,
            _ => {}
        }
    }
    Ok((key, value))
}

fn utf8(b: &[u8]) -> Result<String, ProtobufError> {
    String::from_utf8(b.to_vec()).or_else(|_| bad("a map value is not UTF-8"))
}

/// `ObjectMeta` as a client sets it on create.
fn object_meta(b: &[u8]) -> Result<Value, ProtobufError> {
    let mut m = Map::new();
    let (mut labels, mut annotations, mut finalizers) = (Map::new(), Map::new(), Vec::new());
    for (n, f) in fields(b)? {
        let name = match n {
            1 => Some("name"),
            2 => Some("generateName"),
            3 => Some("namespace"),
            6 => Some("resourceVersion"),
            _ => None,
        };
        if let Some(name) = name {
            m.insert(name.into(), string(&f)?.into());
            continue;
        }
        match n {
            11 => {
                let (k, v) = entry(&f)?;
                labels.insert(k, utf8(v)?.into());
            }
            12 => {
                let (k, v) = entry(&f)?;
                annotations.insert(k, utf8(v)?.into());
            }
            14 => finalizers.push(Value::from(string(&f)?)),
            _ => {}
        }
    }
    m.retain(|_, v| v.as_str().is_some_and(|s| !s.is_empty()));
    if !labels.is_empty() {
        m.insert("labels".into(), labels.into());
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), annotations.into());
    }
    if !finalizers.is_empty() {
        m.insert("finalizers".into(), finalizers.into());
    }
    Ok(Value::Object(m))
}

fn namespace(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut o = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {}});
    for (n, f) in fields(raw)? {
        match n {
            1 => o["metadata"] = object_meta(bytes(&f)?)?,
            2 => {
                let finalizers = fields(bytes(&f)?)?
                    .iter()
                    .filter(|(n, _)| *n == 1)
                    .map(|(_, f)| string(f).map(Value::from))
                    .collect::<Result<Vec<_>, _>>()?;
                if !finalizers.is_empty() {
                    o["spec"] = json!({"finalizers": finalizers});
                }
            }
            _ => {}
        }
    }
    Ok(o)
}

fn secret(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut o = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {}});
    let (mut data, mut string_data) = (Map::new(), Map::new());
    for (n, f) in fields(raw)? {
        match n {
            1 => o["metadata"] = object_meta(bytes(&f)?)?,
            2 => {
                let (k, v) = entry(&f)?;
                let b64 = base64::engine::general_purpose::STANDARD.encode(v);
                data.insert(k, b64.into());
            }
            3 => o["type"] = string(&f)?.into(),
            4 => {
                let (k, v) = entry(&f)?;
                string_data.insert(k, utf8(v)?.into());
            }
            5 => match f {
                Field::Varint(v) => o["immutable"] = (v != 0).into(),
                _ => return bad("immutable is not a bool"),
            },
            _ => {}
        }
    }
    if !data.is_empty() {
        o["data"] = data.into();
    }
    if !string_data.is_empty() {
        o["stringData"] = string_data.into();
    }
    if o["type"].as_str() == Some("") {
        o.as_object_mut().map(|m| m.remove("type"));
    }
    Ok(o)
}

/// Decode a protobuf request body sent for `kind`.
pub fn decode(kind: Kind, body: &[u8]) -> Result<Value, ProtobufError> {
    if !matches!(kind, Kind::Namespace | Kind::Secret) {
        return Err(ProtobufError::Unsupported(kind));
    }
    let Some(envelope) = body.strip_prefix(MAGIC) else {
        return bad("missing the k8s\\0 prefix");
    };
    let (mut type_kind, mut raw, mut encoding) = (String::new(), None, String::new());
    for (n, f) in fields(envelope)? {
        match n {
            1 => {
                for (n, f) in fields(bytes(&f)?)? {
                    if n == 2 {
                        type_kind = string(&f)?;
                    }
                }
            }
            2 => raw = Some(bytes(&f)?),
            3 => encoding = string(&f)?,
            _ => {}
        }
    }
    if !encoding.is_empty() {
        return bad(format!("content encoding {encoding:?}"));
    }
    if type_kind != kind.as_str() {
        return bad(format!(
            "the body holds a {type_kind:?}, the URL is for {kind}s"
        ));
    }
    let raw = raw.unwrap_or_default();
    match kind {
        Kind::Namespace => namespace(raw),
        _ => secret(raw),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// What kubectl 1.32 sent for `kubectl create namespace foo`.
    const CREATE_NS: &[u8] = b"k8s\0\x0a\x0f\x0a\x02v1\x12\x09Namespace\x12\x1b\x0a\x13\x0a\x03foo\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\x42\x00\x12\x00\x1a\x02\x0a\x00\x1a\x00\x22\x00";
    /// ... and for `kubectl create secret generic s9 --from-literal=user=admin`.
    const CREATE_SECRET: &[u8] = b"k8s\0\x0a\x0c\x0a\x02v1\x12\x06Secret\x12\x2b\x0a\x12\x0a\x02s9\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\x42\x00\x12\x0d\x0a\x04user\x12\x05admin\x1a\x06Opaque\x1a\x00\x22\x00";

    #[test]
    fn kubectl_create_namespace() {
        let v = decode(Kind::Namespace, CREATE_NS).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "foo"}})
        );
    }

    #[test]
    fn kubectl_create_secret() {
        let v = decode(Kind::Secret, CREATE_SECRET).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s9"},
                   "type": "Opaque", "data": {"user": "YWRtaW4="}})
        );
    }

    #[test]
    fn labels_and_annotations_are_maps() {
        // ObjectMeta{name: "lab", labels: {team: a}, annotations: {note: hi}, finalizers: [x]}
        let meta =
            b"\x0a\x03lab\x5a\x09\x0a\x04team\x12\x01a\x62\x0a\x0a\x04note\x12\x02hi\x72\x01x";
        assert_eq!(
            object_meta(meta).unwrap(),
            json!({"name": "lab", "labels": {"team": "a"}, "annotations": {"note": "hi"},
                   "finalizers": ["x"]})
        );
    }

    #[test]
    fn other_kinds_and_bodies_are_refused() {
        assert_eq!(
            decode(Kind::Machine, CREATE_NS),
            Err(ProtobufError::Unsupported(Kind::Machine))
        );
        assert!(
            decode(Kind::Secret, CREATE_NS).is_err(),
            "a Namespace is not a Secret"
        );
        assert!(decode(Kind::Namespace, b"{}").is_err());
        assert!(decode(Kind::Namespace, &CREATE_NS[..20]).is_err());
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_fail_without_panicking(
            b in proptest::collection::vec(any::<u8>(), 0..200)
        ) {
            let mut body = MAGIC.to_vec();
            body.extend(&b);
            let _ = decode(Kind::Namespace, &body);
            let _ = decode(Kind::Secret, &body);
        }
    }
}
