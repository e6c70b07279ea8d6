//! Reading the assertion keywords that refine a base type (bounds, lengths,
//! patterns, constants).

use super::reader::Reader;
use crate::types::{Pattern, Refinement, Type};
use serde_json::{Map, Value as Json};

impl Reader<'_, '_, '_> {
    pub(super) fn refine(
        &mut self,
        base: Type,
        map: &Map<String, Json>,
        ptr: &str,
    ) -> Option<Type> {
        let mut r = Refinement::default();
        let mut any = false;
        let b = base.base().clone();
        let is_list = matches!(b, Type::List(_) | Type::Set(_) | Type::Tuple(_));
        let is_text = b == Type::Text;
        let is_num = matches!(b, Type::Int | Type::Decimal);
        for (key, slot) in [
            ("minItems", 0),
            ("maxItems", 1),
            ("minLength", 2),
            ("maxLength", 3),
        ] {
            let Some(v) = map.get(key) else { continue };
            let at = format!("{ptr}/{key}");
            let fits = if slot < 2 { is_list } else { is_text };
            if !fits {
                self.error(
                    "schema.misplaced-keyword",
                    at,
                    format!(
                        "`{key}` does not apply to {}",
                        base.describe(self.ctx.types)
                    ),
                );
                return None;
            }
            let Some(n) = v.as_u64() else {
                self.error(
                    "schema.bad-bound",
                    at,
                    format!("`{key}` is a non-negative integer"),
                );
                return None;
            };
            any = true;
            match slot {
                0 => r.min_items = Some(n),
                1 => r.max_items = Some(n),
                2 => r.min_length = Some(n),
                _ => r.max_length = Some(n),
            }
        }
        for key in ["minimum", "maximum"] {
            let Some(v) = map.get(key) else { continue };
            let at = format!("{ptr}/{key}");
            if !is_num {
                self.error(
                    "schema.misplaced-keyword",
                    at,
                    format!(
                        "`{key}` does not apply to {}",
                        base.describe(self.ctx.types)
                    ),
                );
                return None;
            }
            let Json::Number(n) = v else {
                self.error("schema.bad-bound", at, format!("`{key}` is a number"));
                return None;
            };
            let text = crate::json::canonical(&Json::Number(n.clone()));
            any = true;
            if key == "minimum" {
                r.minimum = Some(text);
            } else {
                r.maximum = Some(text);
            }
        }
        if let Some(p) = map.get("pattern") {
            let at = format!("{ptr}/pattern");
            if !is_text {
                self.error(
                    "schema.misplaced-keyword",
                    at,
                    format!(
                        "`pattern` does not apply to {}",
                        base.describe(self.ctx.types)
                    ),
                );
                return None;
            }
            match p.as_str().map(regex::Regex::new) {
                Some(Ok(re)) => {
                    r.pattern = Some(Pattern(re));
                    any = true;
                }
                Some(Err(e)) => {
                    self.error(
                        "schema.bad-pattern",
                        at,
                        format!("pattern does not compile: {e}"),
                    );
                    return None;
                }
                None => {
                    self.error("schema.bad-pattern", at, "`pattern` is a string");
                    return None;
                }
            }
        }
        Some(if any {
            Type::Refined(Box::new(base), Box::new(r))
        } else {
            base
        })
    }
}
