//! JSON out: the exports answer the page in JSON built by hand (no serde in the wasm).

use std::fmt::Write as _;

use wasm_bindgen::prelude::*;

use brigade::{Error, Result};

/// `s` as a JSON string literal.
pub(super) fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A number as JSON (`null` for NaN and infinities, which JSON lacks).
pub(super) fn json_num(v: f64) -> String {
    if v.is_finite() {
        // Enough digits for timings and errors, short enough to read.
        let s = format!("{v:.6}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        if s.is_empty() || s == "-" || s == "-0" {
            "0".into()
        } else {
            s.to_string()
        }
    } else {
        "null".into()
    }
}

pub(super) fn json_nums(v: &[f64]) -> String {
    let parts: Vec<String> = v.iter().map(|&x| json_num(x)).collect();
    format!("[{}]", parts.join(","))
}

pub(super) fn json_ints(v: &[usize]) -> String {
    let parts: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", parts.join(","))
}

/// A JSON object built field by field.
pub(super) struct Obj(String);

impl Obj {
    pub(super) fn new() -> Obj {
        Obj(String::from("{"))
    }
    pub(super) fn raw(mut self, key: &str, json: impl AsRef<str>) -> Obj {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        self.0.push_str(&json_str(key));
        self.0.push(':');
        self.0.push_str(json.as_ref());
        self
    }
    pub(super) fn num(self, key: &str, v: f64) -> Obj {
        self.raw(key, json_num(v))
    }
    pub(super) fn int(self, key: &str, v: usize) -> Obj {
        self.raw(key, v.to_string())
    }
    pub(super) fn str(self, key: &str, v: &str) -> Obj {
        self.raw(key, json_str(v))
    }
    pub(super) fn bool(self, key: &str, v: bool) -> Obj {
        self.raw(key, if v { "true" } else { "false" })
    }
    pub(super) fn end(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

pub(super) fn json_list(items: impl IntoIterator<Item = String>) -> String {
    format!("[{}]", items.into_iter().collect::<Vec<_>>().join(","))
}

/// One bar of a timeline: `who` (a device index, or the host as -1) did `stage` from `t0` to `t1`.
pub(super) fn bar(who: i64, stage: &str, t0: f64, t1: f64) -> String {
    Obj::new()
        .raw("device", who.to_string())
        .str("stage", stage)
        .num("t0", t0)
        .num("t1", t1)
        .end()
}

/// The work brigade did between two counter snapshots (dispatches > 0 means real kernels ran).
pub(super) fn work_json(before: &brigade::Counters) -> String {
    let w = brigade::counters().since(before);
    Obj::new()
        .int("dispatches", w.dispatches as usize)
        .int("submits", w.submits as usize)
        .int("pipelines", w.pipelines_created as usize)
        .int("bytes_up", w.bytes_uploaded as usize)
        .int("bytes_down", w.bytes_downloaded as usize)
        .end()
}

/// The variant name of an error (`IndivisibleSplit`), for the page's machine-readable status.
pub(super) fn error_kind(e: &Error) -> String {
    let dbg = format!("{e:?}");
    dbg.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("Error")
        .to_string()
}

pub(super) fn to_js(r: Result<String>) -> std::result::Result<String, JsValue> {
    r.map_err(|e| JsValue::from_str(&e.to_string()))
}

/// The raw JSON of `key`'s value in `json` (up to the next `,` or `}`), for the unit tests.
#[cfg(all(test, not(target_arch = "wasm32")))]
pub(super) fn field<'a>(json: &'a str, key: &str) -> &'a str {
    let pat = format!("\"{key}\":");
    let at = json.find(&pat).unwrap_or_else(|| panic!("{key} in {json}"));
    let rest = &json[at + pat.len()..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    &rest[..end]
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    #[test]
    fn json_is_escaped() {
        assert_eq!(json_str("a\"b\\\n"), "\"a\\\"b\\\\\\n\"");
        assert_eq!(json_num(f64::NAN), "null");
        assert_eq!(json_num(1.5), "1.5");
        assert_eq!(json_num(2.0), "2");
        assert_eq!(
            Obj::new().int("a", 1).str("b", "x").end(),
            r#"{"a":1,"b":"x"}"#
        );
    }
}
