//! Prompt templates: `{{…}}` holes in `prompt_template`, `system_prompt`,
//! `task_description` and the hitl `prompt`.
//!
//! The reference: "use `{{state.key}}` mustache syntax to interpolate
//! state". DESIGN §4 (looseness): real files also write `{{$.state.x}}` and
//! `{{x}}`, and index (`{{$.state.topics[0]}}`); all three spellings mean a
//! state path (REQUIREMENTS GAP-EXPR-2).
//!
//! Grammar:
//!
//! ```text
//! template = (text | hole)*
//! hole     = "{{" S* ref S* "}}"        ; ends at the first "}}"
//! ref      = "$" segments               ; $.state…, $.error…, $.last_message…
//!          | "state" segments           ; {{state.x}} = $.state.x
//!          | relative-path              ; {{x.y[0]}} = $.state.x.y[0]
//! text     = anything else; a lone "{" or "}" is text
//! ```
//!
//! Rendering (GAP-EXPR-2): a string value is inserted raw, any other value
//! as its canonical JSON, with no escaping; a path that is not set is an
//! error (template-unbound) that names it.

use crate::path::{self, Path, PathError, Scope, Seg};
use std::fmt;

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    Hole(Path),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub parts: Vec<Part>,
}

/// A syntax error with the byte offset in the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    pub offset: usize,
    pub message: String,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.offset)
    }
}

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderError {
    pub message: String,
}

impl fmt::Display for RenderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Template {
    /// Parses a template; every hole must be a valid path.
    pub fn parse(src: &str) -> Result<Template, TemplateError> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut i = 0;
        while let Some(rel) = src[i..].find("{{") {
            let open = i + rel;
            text.push_str(&src[i..open]);
            let inner_start = open + 2;
            let Some(close_rel) = src[inner_start..].find("}}") else {
                return Err(TemplateError {
                    offset: open,
                    message: "`{{` is never closed with `}}`".into(),
                });
            };
            let inner_end = inner_start + close_rel;
            let raw = &src[inner_start..inner_end];
            let lead = raw.len() - raw.trim_start().len();
            let inner = raw.trim();
            let path = parse_ref(inner).map_err(|e| TemplateError {
                offset: inner_start + lead + e.offset,
                message: format!("bad reference `{{{{{}}}}}`: {}", inner, e.message),
            })?;
            if !text.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut text)));
            }
            parts.push(Part::Hole(path));
            i = inner_end + 2;
        }
        text.push_str(&src[i..]);
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        Ok(Template { parts })
    }

    /// Every path the template reads, in order.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.parts.iter().filter_map(|p| match p {
            Part::Hole(p) => Some(p),
            Part::Text(_) => None,
        })
    }

    /// Renders against `scope`: strings raw, other values as canonical JSON.
    pub fn render(&self, scope: &Scope<'_>) -> Result<String, RenderError> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Hole(p) => match p.resolve(scope) {
                    Ok(Some(serde_json::Value::String(s))) => out.push_str(s),
                    Ok(Some(v)) => flow_abi::json::write_canonical(v, &mut out),
                    Ok(None) => {
                        return Err(RenderError {
                            message: format!("template-unbound: `{p}` is not set"),
                        });
                    }
                    Err(e) => return Err(RenderError { message: e.message }),
                },
            }
        }
        Ok(out)
    }
}

fn parse_ref(inner: &str) -> Result<Path, PathError> {
    if inner.is_empty() {
        return Err(PathError {
            offset: 0,
            message: "empty `{{}}`; write a state key such as `{{state.answer}}`".into(),
        });
    }
    if inner.starts_with('$') {
        return Path::parse(inner);
    }
    let mut segs = path::parse_relative(inner)?;
    if segs.first() == Some(&Seg::Name("state".into())) {
        segs.remove(0);
    }
    Ok(Path::state(segs))
}

/// Prints the template back with every hole in `{{$.…}}` form.
impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.parts {
            match p {
                Part::Text(t) => f.write_str(t)?,
                Part::Hole(p) => write!(f, "{{{{{p}}}}}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn three_spellings_mean_the_same_path() {
        let a = Template::parse("{{state.topic}}").unwrap();
        let b = Template::parse("{{$.state.topic}}").unwrap();
        let c = Template::parse("{{ topic }}").unwrap();
        assert_eq!(a, b);
        assert_eq!(b, c);
    }

    #[test]
    fn renders_strings_raw_and_values_canonically() {
        let state: serde_json::Value =
            serde_json::from_str(r#"{"topics": ["x", "y"], "n": 1.50, "o": {"b": 1, "a": "<&>"}}"#)
                .unwrap();
        let t =
            Template::parse("T: {{$.state.topics[1]}} n={{n}} o={{state.o}} {not a hole}").unwrap();
        assert_eq!(
            t.render(&Scope::state(&state)).unwrap(),
            r#"T: y n=1.5 o={"a":"<&>","b":1} {not a hole}"#
        );
        let e = Template::parse("{{missing}}")
            .unwrap()
            .render(&Scope::state(&json!({})))
            .unwrap_err();
        assert!(e.message.contains("`$.state.missing` is not set"));
    }

    #[test]
    fn errors() {
        assert!(Template::parse("{{ unclosed").is_err());
        assert!(Template::parse("{{}}").is_err());
        assert!(Template::parse("{{$.foo}}").is_err());
        assert!(Template::parse("{{a b}}").is_err());
        assert!(Template::parse("{{state.x[*]}}").is_err());
        let e = Template::parse("ab {{ $.state..x }}").unwrap_err();
        assert_eq!(e.offset, 13);
    }
}
