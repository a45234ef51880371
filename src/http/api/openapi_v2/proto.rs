//! The Swagger 2.0 document as the protobuf of gnostic's
//! `openapi.v2.Document` (github.com/google/gnostic-models,
//! `openapiv2/OpenAPIv2.proto`), the encoding kubectl asks `/openapi/v2`
//! for. Field numbers are that file's. Vendor extensions, defaults,
//! examples and enum values are `Any`s carrying their value as YAML text
//! (JSON is YAML), which is how gnostic and kubectl read them. Pure: a
//! JSON value in, bytes out; what the document does not use is not
//! encoded.

use serde_json::{Map, Value};

/// A message being written.
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u64, wire: u64) {
        self.varint((field << 3) | wire);
    }

    fn message(&mut self, field: u64, m: Msg) {
        self.key(field, 2);
        self.varint(m.0.len() as u64);
        self.0.extend(m.0);
    }

    fn string(&mut self, field: u64, s: &str) {
        if !s.is_empty() {
            self.key(field, 2);
            self.varint(s.len() as u64);
            self.0.extend(s.as_bytes());
        }
    }

    fn bool(&mut self, field: u64, b: bool) {
        if b {
            self.key(field, 0);
            self.varint(1);
        }
    }

    fn int64(&mut self, field: u64, v: i64) {
        if v != 0 {
            self.key(field, 0);
            self.varint(v as u64);
        }
    }

    fn double(&mut self, field: u64, v: f64) {
        self.key(field, 1);
        self.0.extend(v.to_le_bytes());
    }

    /// `v`'s string field, if it has one.
    fn str_of(&mut self, field: u64, v: &Value, key: &str) {
        if let Some(s) = v.get(key).and_then(Value::as_str) {
            self.string(field, s);
        }
    }

    fn bool_of(&mut self, field: u64, v: &Value, key: &str) {
        self.bool(field, v.get(key).and_then(Value::as_bool).unwrap_or(false));
    }

    fn strings_of(&mut self, field: u64, v: &Value, key: &str) {
        for s in v.get(key).and_then(Value::as_array).into_iter().flatten() {
            if let Some(s) = s.as_str() {
                self.string(field, s);
            }
        }
    }

    /// `x-` keys of `v` as repeated `NamedAny` at `field`.
    fn extensions(&mut self, field: u64, v: &Value) {
        for (k, x) in v.as_object().into_iter().flatten() {
            if k.starts_with("x-") {
                let mut named = Msg::default();
                named.string(1, k);
                named.message(2, any(x));
                self.message(field, named);
            }
        }
    }
}

/// `Any { yaml = 2 }`.
fn any(v: &Value) -> Msg {
    let mut m = Msg::default();
    m.string(2, &v.to_string());
    m
}

fn named(name: &str, value: Msg) -> Msg {
    let mut m = Msg::default();
    m.string(1, name);
    m.message(2, value);
    m
}

/// The encoded `openapi.v2.Document` of a Swagger 2.0 JSON document.
pub fn document(doc: &Value) -> Vec<u8> {
    let mut d = Msg::default();
    d.str_of(1, doc, "swagger");
    if let Some(info) = doc.get("info") {
        let mut i = Msg::default();
        i.str_of(1, info, "title");
        i.str_of(2, info, "version");
        d.message(2, i);
    }
    let mut paths = Msg::default();
    for (p, item) in doc
        .get("paths")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        paths.message(2, named(p, path_item(item)));
    }
    d.message(8, paths);
    let mut defs = Msg::default();
    for (n, s) in doc
        .get("definitions")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        defs.message(1, named(n, schema(s)));
    }
    d.message(9, defs);
    d.extensions(16, doc);
    d.0
}

fn path_item(v: &Value) -> Msg {
    let mut m = Msg::default();
    for (field, verb) in [
        (2, "get"),
        (3, "put"),
        (4, "post"),
        (5, "delete"),
        (6, "options"),
        (7, "head"),
        (8, "patch"),
    ] {
        if let Some(op) = v.get(verb) {
            m.message(field, operation(op));
        }
    }
    for p in v
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.message(9, parameters_item(p));
    }
    m.extensions(10, v);
    m
}

fn operation(v: &Value) -> Msg {
    let mut m = Msg::default();
    m.strings_of(1, v, "tags");
    m.str_of(2, v, "summary");
    m.str_of(3, v, "description");
    m.str_of(5, v, "operationId");
    m.strings_of(6, v, "produces");
    m.strings_of(7, v, "consumes");
    for p in v
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.message(8, parameters_item(p));
    }
    if let Some(r) = v.get("responses") {
        m.message(9, responses(r));
    }
    m.strings_of(10, v, "schemes");
    m.bool_of(11, v, "deprecated");
    m.extensions(13, v);
    m
}

fn parameters_item(v: &Value) -> Msg {
    let mut item = Msg::default();
    if let Some(r) = v.get("$ref").and_then(Value::as_str) {
        let mut j = Msg::default();
        j.string(1, r);
        item.message(2, j);
        return item;
    }
    let mut param = Msg::default();
    let place = v.get("in").and_then(Value::as_str).unwrap_or_default();
    if place == "body" {
        let mut b = Msg::default();
        b.str_of(1, v, "description");
        b.str_of(2, v, "name");
        b.str_of(3, v, "in");
        b.bool_of(4, v, "required");
        if let Some(s) = v.get("schema") {
            b.message(5, schema(s));
        }
        b.extensions(6, v);
        param.message(1, b);
    } else {
        // Query and formData number their fields alike, as do path and
        // header (which have no allowEmptyValue).
        let (which, type_field, unique_field) = match place {
            "header" => (1, 5, 19),
            "formData" => (2, 6, 20),
            "path" => (4, 5, 19),
            _ => (3, 6, 20),
        };
        let mut sub = Msg::default();
        sub.bool_of(1, v, "required");
        sub.str_of(2, v, "in");
        sub.str_of(3, v, "description");
        sub.str_of(4, v, "name");
        sub.str_of(type_field, v, "type");
        sub.str_of(type_field + 1, v, "format");
        sub.bool_of(unique_field, v, "uniqueItems");
        sub.extensions(unique_field + 3, v);
        let mut non_body = Msg::default();
        non_body.message(which, sub);
        param.message(2, non_body);
    }
    item.message(1, param);
    item
}

fn responses(v: &Value) -> Msg {
    let mut m = Msg::default();
    for (code, r) in v.as_object().into_iter().flatten() {
        if code.starts_with("x-") {
            continue;
        }
        let mut resp = Msg::default();
        resp.str_of(1, r, "description");
        if let Some(s) = r.get("schema") {
            let mut item = Msg::default();
            item.message(1, schema(s));
            resp.message(2, item);
        }
        resp.extensions(5, r);
        let mut value = Msg::default();
        value.message(1, resp);
        m.message(1, named(code, value));
    }
    m.extensions(2, v);
    m
}

fn schema(v: &Value) -> Msg {
    let mut m = Msg::default();
    let Some(o) = v.as_object() else {
        return m;
    };
    m.str_of(1, v, "$ref");
    m.str_of(2, v, "format");
    m.str_of(3, v, "title");
    m.str_of(4, v, "description");
    if let Some(d) = o.get("default") {
        m.message(5, any(d));
    }
    for (field, key) in [(6, "multipleOf"), (7, "maximum"), (9, "minimum")] {
        if let Some(n) = o.get(key).and_then(Value::as_f64) {
            m.double(field, n);
        }
    }
    m.bool_of(8, v, "exclusiveMaximum");
    m.bool_of(10, v, "exclusiveMinimum");
    for (field, key) in [
        (11, "maxLength"),
        (12, "minLength"),
        (14, "maxItems"),
        (15, "minItems"),
        (17, "maxProperties"),
        (18, "minProperties"),
    ] {
        if let Some(n) = o.get(key).and_then(Value::as_i64) {
            m.int64(field, n);
        }
    }
    m.str_of(13, v, "pattern");
    m.bool_of(16, v, "uniqueItems");
    m.strings_of(19, v, "required");
    for e in o
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.message(20, any(e));
    }
    match o.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            let mut a = Msg::default();
            a.key(2, 0);
            a.varint(u64::from(*b));
            m.message(21, a);
        }
        Some(s @ Value::Object(_)) => {
            let mut a = Msg::default();
            a.message(1, schema(s));
            m.message(21, a);
        }
        _ => {}
    }
    match o.get("type") {
        Some(Value::String(t)) => {
            let mut t_ = Msg::default();
            t_.string(1, t);
            m.message(22, t_);
        }
        Some(Value::Array(ts)) => {
            let mut t_ = Msg::default();
            ts.iter()
                .filter_map(Value::as_str)
                .for_each(|t| t_.string(1, t));
            m.message(22, t_);
        }
        _ => {}
    }
    match o.get("items") {
        Some(s @ Value::Object(_)) => {
            let mut i = Msg::default();
            i.message(1, schema(s));
            m.message(23, i);
        }
        Some(Value::Array(ss)) => {
            let mut i = Msg::default();
            ss.iter().for_each(|s| i.message(1, schema(s)));
            m.message(23, i);
        }
        _ => {}
    }
    for s in o
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.message(24, schema(s));
    }
    if let Some(props) = o.get("properties").and_then(Value::as_object) {
        m.message(25, properties(props));
    }
    m.str_of(26, v, "discriminator");
    m.bool_of(27, v, "readOnly");
    if let Some(e) = o.get("example") {
        m.message(30, any(e));
    }
    m.extensions(31, v);
    m
}

fn properties(props: &Map<String, Value>) -> Msg {
    let mut p = Msg::default();
    for (name, s) in props {
        p.message(1, named(name, schema(s)));
    }
    p
}
