//! [`JsonNames`]: lock names from a JSON request body, one per element of an array.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use lock_runtime::LockError;
use serde_json::Value;

use super::body::{BodyNameSource, invalid_body};
use super::template::invalid;
use super::{NameTemplate, TemplateError};

/// Lock names from a JSON request body: `JsonNames::new("stock:<items[].sku>")` names one lock
/// per element of the body's `items` array, for a [`MultiLockLayer`](crate::MultiLockLayer).
///
/// The template is a [`NameTemplate`] whose placeholders are paths into the body:
///
/// - `<warehouse>`, `<cart.id>`: object fields from the body's root, separated by `.`;
/// - `<items[].sku>`, `<cart.items[].sku>`, `<skus[]>`: one `[]` step iterates an array; the
///   template renders one name per element, and the rest of the path (if any) is read from
///   the element. Several placeholders may iterate the same array
///   (`"stock:<items[].warehouse>:<items[].sku>"`), none another one;
/// - scalar placeholders may stand next to the array one
///   (`"stock:<warehouse>:<items[].sku>"`: every name has the same warehouse).
///
/// A value must be a JSON string or an integer (`42` and `"42"` name the same lock). Anything
/// else makes the body unreadable, answered 400 / `INVALID_ARGUMENT` ([`LockError::InvalidName`]
/// naming the placeholder): a body that is not JSON, a missing field, `null`, a boolean, a
/// float, an object or array where a value belongs, a path through something that is not an
/// object, `[]` on something that is not an array. So is an empty value or one longer than
/// [`max_name_value_len`](crate::MultiLockLayer::max_name_value_len); and the layer rejects an
/// empty array (no lock named) and more distinct names than
/// [`max_names`](crate::MultiLockLayer::max_names). So is a body with a key twice in one object
/// (`{"sku": "a", "sku": "b"}`, also when one is escaped): JSON readers disagree on which one
/// counts, and the handler's must not read another name than the one locked. Values are
/// [escaped](crate::name::escape) as in every template, so a hostile value cannot alias
/// another lock.
///
/// ```
/// use lock_tower::name::JsonNames;
///
/// // {"warehouse": "berlin", "items": [{"sku": "A-1", "qty": 2}, {"sku": 7, "qty": 1}]}
/// // names stock:berlin:A-1 and stock:berlin:7.
/// let names = JsonNames::new("stock:<warehouse>:<items[].sku>");
/// # let _ = names;
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
#[derive(Debug, Clone)]
pub struct JsonNames {
    template: NameTemplate,
    /// One per placeholder, in template order.
    paths: Arc<[JsonPath]>,
}

/// Where a placeholder's value is in the body.
#[derive(Debug, Clone, PartialEq, Eq)]
enum JsonPath {
    /// Fields from the root.
    Scalar(Vec<String>),
    /// Fields from each element of the iterated array.
    Element(Vec<String>),
}

impl JsonNames {
    /// Lock names from `template` (see [`JsonNames`] for the syntax).
    ///
    /// # Panics
    ///
    /// On a malformed template (see [`try_new`](JsonNames::try_new)), like
    /// [`NameTemplate::new`]: it is a programming error.
    pub fn new(template: &str) -> JsonNames {
        match JsonNames::try_new(template) {
            Ok(names) => names,
            Err(error) => panic!("{error}"),
        }
    }

    /// Parses a template, or says why it is malformed: anything [`NameTemplate::try_new`]
    /// rejects, a template without placeholders, an empty field (`<a..b>`, `<.a>`), `[` or
    /// `]` other than one `[]` after a field, more than one `[]` in a placeholder, or
    /// placeholders iterating different arrays.
    ///
    /// ```
    /// use lock_tower::name::JsonNames;
    ///
    /// assert!(JsonNames::try_new("stock:<cart.items[].sku>").is_ok());
    /// let error = JsonNames::try_new("stock:<a[].b[].c>").unwrap_err();
    /// assert!(error.reason().contains("one `[]`"));
    /// ```
    pub fn try_new(template: &str) -> Result<JsonNames, TemplateError> {
        let error = |reason| TemplateError::new(template, reason);
        let parsed = NameTemplate::try_new(template)?;
        let mut array: Option<Vec<String>> = None;
        let mut paths = Vec::new();
        for placeholder in parsed.placeholders() {
            let (path, iterated) = parse_path(placeholder).map_err(error)?;
            if let Some(iterated) = iterated {
                if array.as_ref().is_some_and(|a| *a != iterated) {
                    return Err(error("every `[]` placeholder must iterate the same array"));
                }
                array = Some(iterated);
                paths.push(JsonPath::Element(path));
            } else {
                paths.push(JsonPath::Scalar(path));
            }
        }
        if paths.is_empty() {
            return Err(error("a JSON name template needs a placeholder"));
        }
        let mut all = paths;
        if let Some(array) = array {
            // The array's own path rides at the end (not a placeholder).
            all.push(JsonPath::Scalar(array));
        }
        Ok(JsonNames {
            template: parsed,
            paths: all.into(),
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        self.template.as_str()
    }

    /// The path of the iterated array, if the template has a `[]` placeholder.
    fn array(&self) -> Option<&[String]> {
        let has_array = self.paths.iter().any(|p| matches!(p, JsonPath::Element(_)));
        match self.paths.last() {
            Some(JsonPath::Scalar(path)) if has_array => Some(path),
            _ => None,
        }
    }

    /// Renders the template once: scalar placeholders from `root`, element ones from
    /// `element`.
    fn render(
        &self,
        root: &Value,
        element: Option<&Value>,
        max_value_len: usize,
    ) -> Result<String, LockError> {
        let mut paths = self.paths.iter();
        let mut failure = None;
        let name = self.template.render(max_value_len, |placeholder| {
            // Placeholders come in template order, like `paths`.
            let found = match paths.next()? {
                JsonPath::Scalar(path) => lookup(root, path),
                JsonPath::Element(path) => lookup(element?, path),
            };
            match found.and_then(scalar) {
                Ok(value) => Some(value),
                Err(reason) => {
                    failure = Some(invalid(placeholder, reason));
                    None
                }
            }
        })?;
        match (failure, name) {
            (Some(error), _) => Err(error),
            (None, Some(name)) => Ok(name),
            (None, None) => Err(invalid_body("a placeholder has no value")),
        }
    }
}

/// Splits `items[].sku` into the path read for the value (`["sku"]`, from each element) and
/// the iterated array (`["items"]`); a path without `[]` is read from the root.
#[allow(clippy::type_complexity)]
fn parse_path(placeholder: &str) -> Result<(Vec<String>, Option<Vec<String>>), &'static str> {
    let fields = |text: &str| -> Result<Vec<String>, &'static str> {
        text.split('.')
            .map(|field| {
                if field.is_empty() {
                    Err("a placeholder has an empty field (`<a..b>`, `<.a>`, `<a.>`)")
                } else if field.contains(['[', ']']) {
                    Err("`[` and `]` may only appear as one `[]` right after a field")
                } else {
                    Ok(field.to_owned())
                }
            })
            .collect()
    };
    match placeholder.split_once("[]") {
        None => Ok((fields(placeholder)?, None)),
        Some((array, rest)) => {
            if rest.contains("[]") {
                return Err("a placeholder may iterate one array: only one `[]`");
            }
            let array = fields(array)?;
            let path = match rest {
                "" => Vec::new(),
                _ => match rest.strip_prefix('.') {
                    Some(rest) => fields(rest)?,
                    None => return Err("`[]` must be followed by `.field` or end the placeholder"),
                },
            };
            Ok((path, Some(array)))
        }
    }
}

/// The value at `path` under `value`.
fn lookup<'v>(mut value: &'v Value, path: &[String]) -> Result<&'v Value, &'static str> {
    for field in path {
        let Value::Object(map) = value else {
            return Err("the placeholder's path crosses a JSON value that is not an object");
        };
        value = map
            .get(field)
            .ok_or("the placeholder's field is missing from the request body")?;
    }
    Ok(value)
}

/// A string's bytes or an integer's decimal digits.
fn scalar(value: &Value) -> Result<Cow<'_, [u8]>, &'static str> {
    match value {
        Value::String(s) => Ok(Cow::Borrowed(s.as_bytes())),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(Cow::Owned(n.to_string().into_bytes())),
        _ => Err("a value for a lock name must be a JSON string or integer"),
    }
}

/// Whether an object of `body` (JSON that parsed) has some key twice, compared after
/// unescaping (`"sku"` and `"s\u006bu"` are one key). A JSON reader keeps the last of them
/// and another reader of the same body (a first-wins parser, the handler's own) may keep the
/// first: the locks would name another resource than the one written. One pass over the bytes
/// with a stack of the open objects' keys, no recursion.
fn has_duplicate_key(body: &[u8]) -> bool {
    use std::collections::HashSet;

    // `None` for an array, the keys seen so far for an object.
    let mut open: Vec<Option<HashSet<String>>> = Vec::new();
    let mut key_next = false;
    let mut i = 0;
    while let Some(&byte) = body.get(i) {
        match byte {
            b'{' => {
                open.push(Some(HashSet::new()));
                key_next = true;
            }
            b'[' => {
                open.push(None);
                key_next = false;
            }
            b'}' | b']' => {
                open.pop();
                key_next = false;
            }
            b',' => key_next = matches!(open.last(), Some(Some(_))),
            b'"' => {
                let start = i;
                i += 1;
                while let Some(&b) = body.get(i) {
                    match b {
                        b'\\' => i += 2,
                        b'"' => break,
                        _ => i += 1,
                    }
                }
                if key_next {
                    key_next = false;
                    let Some(literal) = body.get(start..=i) else {
                        return false;
                    };
                    let Ok(key) = serde_json::from_slice::<String>(literal) else {
                        return false;
                    };
                    if let Some(Some(keys)) = open.last_mut()
                        && !keys.insert(key)
                    {
                        return true;
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

impl BodyNameSource for JsonNames {
    /// The template as written.
    fn metrics_group(&self) -> Option<&str> {
        Some(self.template.as_str())
    }

    fn lock_names(
        &self,
        _: &Parts,
        body: &Bytes,
        max_value_len: usize,
    ) -> Result<Vec<String>, LockError> {
        let root: Value = serde_json::from_slice(body)
            .map_err(|_| invalid_body("the request body is not JSON"))?;
        if has_duplicate_key(body) {
            return Err(invalid_body(
                "the request body has a duplicate key in an object",
            ));
        }
        let Some(array) = self.array() else {
            return Ok(vec![self.render(&root, None, max_value_len)?]);
        };
        let elements = match lookup(&root, array) {
            Ok(Value::Array(elements)) => elements,
            Ok(_) => {
                return Err(invalid_body(
                    "the template's `[]` is not a JSON array in the request body",
                ));
            }
            Err(reason) => return Err(invalid_body(reason)),
        };
        elements
            .iter()
            .map(|element| self.render(&root, Some(element), max_value_len))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(template: &str, body: &str) -> Result<Vec<String>, LockError> {
        let parts = http::Request::new(()).into_parts().0;
        JsonNames::new(template).lock_names(&parts, &Bytes::copy_from_slice(body.as_bytes()), 20)
    }

    #[test]
    fn the_metrics_group_is_the_template() {
        let names = JsonNames::new("stock:<items[].sku>");
        assert_eq!(names.metrics_group(), Some("stock:<items[].sku>"));
    }

    fn reason(result: Result<Vec<String>, LockError>) -> String {
        match result {
            Err(LockError::InvalidName { name, reason }) => format!("{name}: {reason}"),
            other => panic!("expected InvalidName, got {other:?}"),
        }
    }

    #[test]
    fn one_name_per_element_with_scalars_beside_the_array() {
        let body =
            r#"{"warehouse": "b-1", "cart": {"items": [{"sku": "A:1"}, {"sku": 7}, {"sku": -3}]}}"#;
        assert_eq!(
            names("stock:<warehouse>:<cart.items[].sku>", body).unwrap(),
            ["stock:b-1:A%3A1", "stock:b-1:7", "stock:b-1:-3"]
        );
        assert_eq!(
            names("s:<skus[]>", r#"{"skus": ["x", 18446744073709551615]}"#).unwrap(),
            ["s:x", "s:18446744073709551615"]
        );
        assert_eq!(
            names(
                "s:<items[].w>.<items[].sku>",
                r#"{"items": [{"w": 1, "sku": 2}]}"#
            )
            .unwrap(),
            ["s:1.2"]
        );
        assert_eq!(names("order:<id>", r#"{"id": 5}"#).unwrap(), ["order:5"]);
        assert!(
            names("s:<items[].sku>", r#"{"items": []}"#)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn unreadable_bodies_are_invalid_names_naming_the_placeholder() {
        let t = "stock:<items[].sku>";
        assert!(reason(names(t, "not json")).contains("not JSON"));
        assert!(reason(names(t, "")).contains("not JSON"));
        assert!(reason(names(t, r#"{"cart": 1}"#)).contains("missing"));
        assert!(reason(names(t, r#"{"items": {"sku": 1}}"#)).contains("not a JSON array"));
        assert!(reason(names(t, r#"{"items": "x"}"#)).contains("not a JSON array"));
        assert!(reason(names(t, r#"[1]"#)).contains("not an object"));
        for element in [r#"{}"#, r#"{"sku": null}"#] {
            let r = reason(names(t, &format!(r#"{{"items": [{element}]}}"#)));
            assert!(r.starts_with("<items[].sku>"), "{r}");
        }
        for wrong in ["1.5", "1e3", "true", "null", "{}", "[1]"] {
            let r = reason(names(t, &format!(r#"{{"items": [{{"sku": {wrong}}}]}}"#)));
            assert!(r.contains("string or integer"), "{wrong}: {r}");
        }
        assert!(reason(names(t, r#"{"items": [{"sku": ""}]}"#)).contains("empty"));
        assert!(
            reason(names(t, r#"{"items": [{"sku": "123456789012345678901"}]}"#)).contains("longer")
        );
        assert!(reason(names(t, r#"{"items": ["a"]}"#)).contains("not an object"));
        // A scalar next to the array is required too.
        assert!(
            reason(names("s:<w>:<items[].sku>", r#"{"items": [{"sku": 1}]}"#)).contains("missing")
        );
        // Deeply nested input is refused by the parser's recursion limit, not a stack overflow.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(reason(names(t, &deep)).contains("not JSON"));
    }

    #[test]
    fn a_key_twice_in_an_object_is_refused_wherever_it_is() {
        let t = "stock:<items[].sku>";
        for body in [
            r#"{"items": [{"sku": "a", "sku": "b"}]}"#,
            r#"{"items": [{"sku": "a"}], "items": [{"sku": "b"}]}"#,
            r#"{"items": [{"sku": "a", "s\u006bu": "b"}]}"#,
            r#"{"items": [{"sku": "a"}], "x": {"y": [{"z": 1, "z": 2}]}}"#,
        ] {
            assert!(reason(names(t, body)).contains("duplicate key"), "{body}");
        }
        // Keys repeated across objects, and keys' text inside values, are no duplicates.
        assert_eq!(
            names(
                t,
                r#"{"items": [{"sku": "a", "n": "sku"}, {"sku": "b\",\"sku"}], "n": {"sku": 1}}"#
            )
            .unwrap(),
            ["stock:a", "stock:b%22%2C%22sku"]
        );
    }

    #[test]
    fn malformed_templates_are_rejected() {
        for (bad, why) in [
            ("stock", "placeholder"),
            ("s:<a[].b[].c>", "one `[]`"),
            ("s:<a[]b>", "followed by"),
            ("s:<a..b>", "empty field"),
            ("s:<[].a>", "empty field"),
            ("s:<a[1]>", "`[]`"),
            ("s:<a]>", "`[]`"),
            ("s:<a[].x>:<b[].y>", "same array"),
            ("s:<a><b>", "separated"),
        ] {
            let error = JsonNames::try_new(bad).unwrap_err();
            assert!(error.reason().contains(why), "{bad}: {error}");
            assert_eq!(error.template(), bad);
        }
    }

    #[test]
    #[should_panic(expected = "one `[]`")]
    fn new_panics_on_a_malformed_template() {
        JsonNames::new("s:<a[].b[]>");
    }
}
