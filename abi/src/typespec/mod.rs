//! Type descriptions and type terms.
//!
//! Two term languages cross the host boundary:
//!
//! * The type-description graph of host-boundary.txt, "Type descriptions":
//!   a [`TypeSpec`] (what a generic Tool's toolkit is generated from) and a
//!   generic call's types view, [`CallView`]. Terms are [`SpecTerm`]s that
//!   refer to unsubstituted [`Template`]s by local id, so a recursive type is
//!   a finite graph and is validated as one: nothing here ever copies a
//!   template body.
//! * The simpler term language of the `flow tools` document
//!   (running-a-program.txt, "flow tools"): [`Term`].
//!
//! Every reader here is strict and total: it takes an already parsed
//! [`serde_json::Value`] (read with [`crate::json::parse`] when it comes from
//! outside), never panics, and reports every problem it finds as a
//! [`TypeSpecError`] naming a JSON Pointer (RFC 6901) into the document.
//!
//! Decisions the seed leaves open, written down here:
//! * Names, identities, local ids and owners must be non-empty strings.
//! * `lexical_ordinal` and `Param` indices are held as `u64`; a larger
//!   integer is refused as out of range.
//! * Two templates of one graph with the same identity conflict ("one
//!   declaration is not repeated with a different instantiated body").
//! * "Recursive templates obey types.md" is read as: the set of
//!   instantiations a template graph reaches is finite. A template that
//!   reaches itself with an argument that grows (`A<T>` holding `A<List<T>>`)
//!   is refused ("invalid recursive substitution"). This is the expansive
//!   cycle test over the graph of type-parameter flows, so it terminates on
//!   any finite graph.
//! * Terms nest at most [`crate::limits::MAX_DEPTH`] deep, so every walk
//!   over them is bounded whatever built the JSON value.
//! * A `Tuple` holds at least two terms in both term languages.
//!
//! Layout: `graph` holds the description graph's types and entry points,
//! `shape` the strict JSON readers both languages share, `read` the graph's
//! reader, `validate` its reference and recursion checks, `view` a call view
//! against the served TypeSpec, `render` the message notation and `term` the
//! `flow tools` language.

mod graph;
mod read;
mod render;
mod shape;
mod term;
#[cfg(test)]
mod test_support;
mod validate;
mod view;

pub use graph::{
    CallView, CtorSpec, FieldSpec, Payload, Slot, SpecTerm, TOOL_OWNER, Template, TemplateKind,
    TypeSpec,
};
pub use render::render;
pub use term::Term;

use std::fmt;

/// One problem found in a type description or term: where (a JSON Pointer
/// into the document; `""` is the whole document) and what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeSpecError {
    pub pointer: String,
    pub message: String,
}

impl fmt::Display for TypeSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "(document): {}", self.message)
        } else {
            write!(f, "{}: {}", self.pointer, self.message)
        }
    }
}

impl std::error::Error for TypeSpecError {}

/// The built-in types, spelled as terms in both term languages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Prim {
    Int,
    Decimal,
    Bool,
    Text,
    Bytes,
    Duration,
    Instant,
    Unit,
    Never,
    /// `json.Value`.
    JsonValue,
}

impl Prim {
    pub const ALL: [Prim; 10] = [
        Prim::Int,
        Prim::Decimal,
        Prim::Bool,
        Prim::Text,
        Prim::Bytes,
        Prim::Duration,
        Prim::Instant,
        Prim::Unit,
        Prim::Never,
        Prim::JsonValue,
    ];

    /// The term spelling, e.g. `"Int"` or `"json.Value"`.
    pub fn name(self) -> &'static str {
        match self {
            Prim::Int => "Int",
            Prim::Decimal => "Decimal",
            Prim::Bool => "Bool",
            Prim::Text => "Text",
            Prim::Bytes => "Bytes",
            Prim::Duration => "Duration",
            Prim::Instant => "Instant",
            Prim::Unit => "Unit",
            Prim::Never => "Never",
            Prim::JsonValue => "json.Value",
        }
    }

    pub fn from_name(name: &str) -> Option<Prim> {
        Prim::ALL.into_iter().find(|p| p.name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::shape::err_at;

    #[test]
    fn error_display() {
        let e = err_at("/ok", "bad");
        assert_eq!(e.to_string(), "/ok: bad");
        assert_eq!(err_at("", "bad").to_string(), "(document): bad");
    }
}
