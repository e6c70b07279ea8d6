//! Check diagnostics: a stable code, a severity, a JSON Pointer into the
//! FlowSpec document and a message.
//!
//! Shape follows REQUIREMENTS GAP-DIAG-1 (`{severity, code, message,
//! location: {pointer}}`). Codes are `FS` + four digits, grouped by hundreds
//! (the full list is in `docs/engine.md` and on [`Code`]); a code never
//! changes meaning once released, and a retired code is never reused.

use std::cmp::Ordering;
use std::fmt;

/// Whether a diagnostic refuses the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// The program does not check; a run is refused before Start.
    Error,
    /// Worth knowing; the program still checks.
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = ($code:literal, $name:literal, $sev:ident), )*) => {
        /// Every diagnostic code the checker emits. `code()` is the stable
        /// identifier, `name()` a readable slug, `severity()` the severity
        /// the code always has.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Code {
            $( $(#[$doc])* $variant, )*
        }

        impl Code {
            /// All codes, in code order.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The stable identifier, e.g. `"FS0205"`.
            pub fn code(self) -> &'static str {
                match self { $(Code::$variant => $code,)* }
            }

            /// A readable slug, e.g. `"unknown-node"`.
            pub fn name(self) -> &'static str {
                match self { $(Code::$variant => $name,)* }
            }

            /// The severity every diagnostic with this code has.
            pub fn severity(self) -> Severity {
                match self { $(Code::$variant => Severity::$sev,)* }
            }
        }
    };
}

codes! {
    // --- 01xx: document shape ---
    /// A field has the wrong JSON type (e.g. a number where a string belongs).
    WrongType = ("FS0101", "wrong-type", Error),
    /// A required field is missing.
    MissingField = ("FS0102", "missing-field", Error),
    /// A field flowd does not know; it is ignored (REQUIREMENTS GAP-FS-1).
    UnknownField = ("FS0103", "unknown-field", Warning),
    /// A string that must be one of a fixed set of values is not.
    BadValue = ("FS0104", "bad-value", Error),
    /// A number outside its allowed range, or not whole where an integer belongs.
    OutOfRange = ("FS0105", "out-of-range", Error),
    /// `spec_version` is not `"0.2.0"` or `"1.0.0"`.
    UnsupportedVersion = ("FS0106", "unsupported-version", Error),
    /// A value in an informational field that flowd does not recognise or
    /// does not act on; it is accepted and has no effect.
    IgnoredValue = ("FS0107", "ignored-value", Warning),

    // --- 02xx: ids and graph ---
    /// An id not in the form buildaharness's schema accepts.
    BadId = ("FS0201", "bad-id", Error),
    /// Two nodes (or two agents) share an id.
    DuplicateId = ("FS0202", "duplicate-id", Error),
    /// Fewer than 2 nodes.
    TooFewNodes = ("FS0203", "too-few-nodes", Error),
    /// Not exactly one `input` node.
    InputCount = ("FS0204", "input-count", Error),
    /// A node reference (edge end, branch target, default target, fork target,
    /// fail_branch target, context_from) names no node.
    UnknownNode = ("FS0205", "unknown-node", Error),
    /// A node that is not a `condition` or `parallel_fork` has more than one
    /// outgoing route.
    MultipleRoutes = ("FS0206", "multiple-routes", Error),
    /// A node that is not an `output` has no route out.
    DeadEnd = ("FS0207", "dead-end", Error),
    /// A node the input node cannot reach; it never runs.
    Unreachable = ("FS0208", "unreachable", Warning),
    /// No `output` node is reachable from the input node.
    NoOutputReachable = ("FS0209", "no-output-reachable", Error),
    /// A direct edge out of a `condition` or `parallel_fork` node that is not
    /// one of the node's own targets.
    StrayEdge = ("FS0210", "stray-edge", Error),
    /// A `parallel_fork` with fewer than 2 distinct targets.
    TooFewTargets = ("FS0211", "too-few-targets", Error),
    /// An `agent_debate` with fewer than 2 agents.
    TooFewAgents = ("FS0212", "too-few-agents", Error),
    /// A `parallel_fork`'s branches do not meet at one `parallel_join`, or a
    /// branch reaches an `output` node before its join.
    ForkJoin = ("FS0213", "fork-join", Error),
    /// Edges out of an `output` node; they are never followed.
    OutputEdge = ("FS0214", "output-edge", Warning),

    // --- 03xx: references ---
    /// `agent_ref` / debate agent / `manager_agent_ref` names no agent.
    UnknownAgent = ("FS0301", "unknown-agent", Error),
    /// `tool_id` / agent tool names no entry of the `tools` registry.
    UnknownTool = ("FS0302", "unknown-tool", Error),
    /// `store_id` / `memory_store_id` names no entry of `memory_stores`.
    UnknownStore = ("FS0303", "unknown-store", Error),
    /// A state key written or read that `state_schema` does not declare.
    UndeclaredStateKey = ("FS0304", "undeclared-state-key", Warning),
    /// An `fn_ref` not of the form `module:function`.
    BadFnRef = ("FS0305", "bad-fn-ref", Error),
    /// A `parallel_fork` `input_map` key that is not one of its targets.
    UnknownBranch = ("FS0306", "unknown-branch", Error),
    /// A `tool_invoke` map that does not fit the tool's declared schemas: an
    /// `input_map` parameter or `output_map` reply field the schema does not
    /// have, or a required parameter nothing provides.
    ToolField = ("FS0307", "tool-field", Error),
    /// A tool (`tool_id`, agent tool, `source_tool`) or memory store named
    /// by a flow that declares no `tools` / `memory_stores` at all: accepted
    /// as buildaharness accepts it, the tool bound by `<module>#<id>`.
    NoRegistry = ("FS0308", "no-registry", Warning),

    // --- 04xx: fields required or ignored by a mode ---
    /// A field the node's mode requires is missing.
    MissingForMode = ("FS0401", "missing-for-mode", Error),
    /// A field the node's mode ignores is present.
    IgnoredForMode = ("FS0402", "ignored-for-mode", Warning),

    // --- 05xx: paths, expressions, templates ---
    /// A JSONPath that does not parse.
    BadPath = ("FS0501", "bad-path", Error),
    /// A condition expression that does not parse.
    BadExpression = ("FS0502", "bad-expression", Error),
    /// A template that does not parse.
    BadTemplate = ("FS0503", "bad-template", Error),
    /// A path whose root is not available where it is used (e.g.
    /// `$.last_message` outside an `agent_debate`).
    BadRoot = ("FS0504", "bad-root", Error),

    // --- 06xx: schemas ---
    /// A schema flowd cannot read into a Flow type.
    BadSchema = ("FS0601", "bad-schema", Error),
    /// A schema note worth knowing (e.g. `default` is never filled in).
    SchemaNote = ("FS0602", "schema-note", Warning),

    // --- 07xx: unsupported constructs ---
    /// A harness node type (world_model, …) in a flow without
    /// `harness_meta.enabled: true` (FS-HN-1).
    HarnessNode = ("FS0701", "harness-node", Error),
    /// A construct flowd refuses until support exists (`custom` reducers).
    Unsupported = ("FS0702", "unsupported", Error),
    /// A node `type` that is neither a base nor a harness type.
    UnknownNodeType = ("FS0703", "unknown-node-type", Error),

    // --- 08xx: advice ---
    /// A result that is computed and then lost (no `output_key`).
    LostResult = ("FS0801", "lost-result", Warning),
    /// A literal URL where the reference asks for an environment reference.
    LiteralUrl = ("FS0802", "literal-url", Warning),
    /// A node that does nothing when it runs (a `transform` in `mapping`
    /// mode with no entries).
    NoEffect = ("FS0803", "no-effect", Warning),

    // --- 09xx: types of state writes ---
    /// A value whose type is known before the run (an llm_call's text or
    /// structured answer, a tool's declared output, a hitl reply, a
    /// declared state field) is written to a state field whose declared
    /// type it can never fit.
    StateType = ("FS0901", "state-type", Error),
    /// Such a value is written to a state field whose declared type only
    /// some of its values fit (a number into an `integer`, a record
    /// missing a required field): the write is decoded at run time, and a
    /// value that does not fit fails its reply.
    StateTypeMayNotFit = ("FS0902", "state-type-may-not-fit", Warning),
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// One problem found in a FlowSpec document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub code: Code,
    pub severity: Severity,
    /// RFC 6901 JSON Pointer to the field, `""` for the whole document.
    pub pointer: String,
    pub message: String,
    /// A finer code from the part that found the problem, e.g. flow-abi's
    /// `schema.unknown-keyword` under FS0601/FS0602.
    pub subcode: Option<&'static str>,
    /// The module (FlowSpec file, relative to the program root) the pointer
    /// is in; set when a whole program is checked.
    pub module: Option<String>,
    /// Other places the problem involves, in the same module (GAP-DIAG-1
    /// `related`): e.g. the declaration of the state field a write does not
    /// fit.
    pub related: Vec<Related>,
}

/// A place a diagnostic involves besides its own pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Related {
    /// RFC 6901 JSON Pointer into the same module.
    pub pointer: String,
    /// What is there, e.g. "the state field `tags` is declared here".
    pub message: String,
}

impl Diagnostic {
    /// A diagnostic with the code's own severity.
    pub fn new(code: Code, pointer: impl Into<String>, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            code,
            severity: code.severity(),
            pointer: pointer.into(),
            message: message.into(),
            subcode: None,
            module: None,
            related: Vec::new(),
        }
    }

    /// The diagnostic with `related` places added.
    pub fn with_related(mut self, related: Vec<Related>) -> Diagnostic {
        self.related.extend(related);
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// The wire form (GAP-DIAG-1):
    /// `{"severity","code","name","message","location":{"pointer"},
    /// "related"?:[{"message","location":{"pointer"}}]}`.
    pub fn to_json(&self) -> serde_json::Value {
        let location = |pointer: &str| {
            let mut l = serde_json::Map::new();
            if let Some(m) = &self.module {
                l.insert("module".into(), m.clone().into());
            }
            l.insert("pointer".into(), pointer.into());
            serde_json::Value::Object(l)
        };
        let mut m = serde_json::Map::new();
        m.insert("severity".into(), self.severity.as_str().into());
        m.insert("code".into(), self.code.code().into());
        m.insert("name".into(), self.code.name().into());
        if let Some(s) = self.subcode {
            m.insert("subcode".into(), s.into());
        }
        m.insert("message".into(), self.message.clone().into());
        m.insert("location".into(), location(&self.pointer));
        if !self.related.is_empty() {
            let related = self.related.iter().map(|r| {
                let mut o = serde_json::Map::new();
                o.insert("message".into(), r.message.clone().into());
                o.insert("location".into(), location(&r.pointer));
                serde_json::Value::Object(o)
            });
            m.insert("related".into(), related.collect());
        }
        serde_json::Value::Object(m)
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() {
            "/"
        } else {
            &self.pointer
        };
        if let Some(m) = &self.module {
            write!(f, "{m}: ")?;
        }
        write!(
            f,
            "{} {} [{}] at {}: {}",
            self.severity.as_str(),
            self.code.code(),
            self.subcode.unwrap_or(self.code.name()),
            at,
            self.message
        )?;
        for r in &self.related {
            write!(f, "; {} at {}", r.message, r.pointer)?;
        }
        Ok(())
    }
}

/// Appends one reference token to a JSON Pointer, escaping `~` and `/`
/// (RFC 6901 §3).
pub fn push_token(pointer: &str, token: &str) -> String {
    let mut out = String::with_capacity(pointer.len() + token.len() + 1);
    out.push_str(pointer);
    out.push('/');
    for c in token.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
    out
}

/// Orders diagnostics deterministically: by module, then pointer (array
/// indexes compared as numbers, so `/nodes/2` comes before `/nodes/10`),
/// then code, then message.
pub fn sort(diags: &mut [Diagnostic]) {
    diags.sort_by(|a, b| {
        a.module
            .cmp(&b.module)
            .then_with(|| cmp_pointer(&a.pointer, &b.pointer))
            .then(a.code.cmp(&b.code))
            .then_with(|| a.message.cmp(&b.message))
    });
}

fn cmp_pointer(a: &str, b: &str) -> Ordering {
    let mut ia = a.split('/');
    let mut ib = b.split('/');
    loop {
        match (ia.next(), ib.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let o = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(nx), Ok(ny)) => nx.cmp(&ny).then_with(|| x.cmp(y)),
                    _ => x.cmp(y),
                };
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_well_formed() {
        let mut seen = std::collections::BTreeSet::new();
        for c in Code::ALL {
            assert!(seen.insert(c.code()), "duplicate {}", c.code());
            assert_eq!(c.code().len(), 6);
            assert!(c.code().starts_with("FS"));
        }
    }

    /// REQUIREMENTS GAP-DIAG-1: `{severity, code, message, location: {module?, pointer}}`.
    #[test]
    fn wire_form() {
        let mut d = Diagnostic::new(
            Code::UnknownNode,
            "/edges/0/to",
            "edge target `x` is not a node",
        );
        assert_eq!(
            flow_abi::json::canonical(&d.to_json()),
            r#"{"code":"FS0205","location":{"pointer":"/edges/0/to"},"message":"edge target `x` is not a node","name":"unknown-node","severity":"error"}"#
        );
        d.module = Some("support.json".into());
        d.subcode = Some("x.y");
        assert_eq!(d.to_json()["location"]["module"], "support.json");
        assert_eq!(d.to_json()["subcode"], "x.y");
        assert_eq!(
            d.to_string(),
            "support.json: error FS0205 [x.y] at /edges/0/to: edge target `x` is not a node"
        );
    }

    #[test]
    fn pointer_escapes() {
        assert_eq!(push_token("/tools", "a/b~c"), "/tools/a~1b~0c");
    }

    #[test]
    fn sorts_indexes_numerically() {
        let mut d = vec![
            Diagnostic::new(Code::BadId, "/nodes/10/id", "x"),
            Diagnostic::new(Code::BadId, "/nodes/2/id", "x"),
            Diagnostic::new(Code::BadId, "", "x"),
        ];
        sort(&mut d);
        let p: Vec<_> = d.iter().map(|d| d.pointer.as_str()).collect();
        assert_eq!(p, ["", "/nodes/2/id", "/nodes/10/id"]);
    }
}
