//! Compiling the syntax written inside string fields: templates, paths,
//! assignment targets and function references.

use super::FnRef;
use crate::diag::Code;
use crate::path::{Path, Target};
use crate::read::{Cx, Obj};
use crate::template::Template;
use std::collections::BTreeMap;

pub(super) fn template_field(cx: &mut Cx, o: &mut Obj<'_>, key: &'static str) -> Option<Template> {
    let src = o.str(cx, key)?;
    Some(compile_template(cx, &src, o.at(key)))
}

pub(super) fn compile_template(cx: &mut Cx, src: &str, ptr: String) -> Template {
    match Template::parse(src) {
        Ok(t) => t,
        Err(e) => {
            cx.push(Code::BadTemplate, ptr, e.to_string());
            Template { parts: Vec::new() }
        }
    }
}

/// A placeholder path used only when a diagnostic already refuses the flow.
fn placeholder_path() -> Path {
    Path::state(Vec::new())
}

/// A bare-JSONPath `*_expr` field: "*_expr fields use bare JSONPath, not
/// mustache … Do not use {{}} syntax here." (reference, memory_read).
fn expr_path(cx: &mut Cx, src: &str, ptr: String) -> Path {
    if src.contains("{{") {
        cx.push(
            Code::BadPath,
            ptr,
            format!("`{src}` uses `{{{{}}}}`; *_expr fields take a bare JSONPath such as `$.state.question`"),
        );
        return placeholder_path();
    }
    source_path(cx, src, ptr)
}

pub(super) fn source_path(cx: &mut Cx, src: &str, ptr: String) -> Path {
    match Path::parse_source(src) {
        Ok(p) => p,
        Err(e) => {
            cx.push(Code::BadPath, ptr, format!("bad path `{src}`: {e}"));
            placeholder_path()
        }
    }
}

pub(super) fn opt_expr_path(cx: &mut Cx, o: &mut Obj<'_>, key: &'static str) -> Option<Path> {
    let src = o.str(cx, key)?;
    Some(expr_path(cx, &src, o.at(key)))
}

pub(super) fn req_expr_path(cx: &mut Cx, o: &mut Obj<'_>, key: &'static str) -> Path {
    match o.req_str(cx, key) {
        Some(src) => expr_path(cx, &src, o.at(key)),
        None => placeholder_path(),
    }
}

pub(super) fn source_map(
    cx: &mut Cx,
    o: &mut Obj<'_>,
    key: &'static str,
) -> BTreeMap<String, Path> {
    o.str_map(cx, key)
        .into_iter()
        .map(|(k, src, ptr)| (k, source_path(cx, &src, ptr)))
        .collect()
}

pub(super) fn target(cx: &mut Cx, src: &str, ptr: String) -> Target {
    match Target::parse(src) {
        Ok(t) => t,
        Err(e) => {
            cx.push(Code::BadPath, ptr, format!("bad target `{src}`: {e}"));
            Target {
                field: String::new(),
                below: Vec::new(),
            }
        }
    }
}

pub(super) fn target_map(
    cx: &mut Cx,
    o: &mut Obj<'_>,
    key: &'static str,
) -> BTreeMap<String, Target> {
    o.str_map(cx, key)
        .into_iter()
        .map(|(k, src, ptr)| (k, target(cx, &src, ptr)))
        .collect()
}

pub(super) fn fn_ref(cx: &mut Cx, src: &str, ptr: String) -> FnRef {
    FnRef::parse(src).unwrap_or_else(|| {
        cx.push(
            Code::BadFnRef,
            ptr,
            format!("fn_ref `{src}` must be `module:function`, an npm ref `@scope/pkg/fn` or a local path `./path/to/fn.ts`; flowd binds it as the declaration `fn/<module>#<function>`"),
        );
        FnRef {
            module: String::new(),
            function: String::new(),
        }
    })
}

pub(super) fn opt_fn_ref(cx: &mut Cx, o: &mut Obj<'_>, key: &'static str) -> Option<FnRef> {
    let s = o.str(cx, key)?;
    Some(fn_ref(cx, &s, o.at(key)))
}
