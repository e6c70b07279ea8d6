//! The condition language of `condition` nodes, `conditional` edges and
//! `agent_debate` termination conditions.
//!
//! DESIGN §4: "Expressions are a small deterministic language: JSONPath
//! (RFC 9535) operands over `$.state` (and `$.last_message` in debates),
//! literals, `== != < <= > >= contains`, `&& || !`, parentheses."
//! REQUIREMENTS GAP-EXPR-1 adds the word forms `and`/`or`/`not`, "Numbers
//! compare by exact value" and "A missing path is null".
//!
//! Grammar (lowest binding first; binary operators are left-associative):
//!
//! ```text
//! expr     = or
//! or       = and (("||" | "or") and)*
//! and      = eq (("&&" | "and") eq)*
//! eq       = rel (("==" | "!=") rel)*
//! rel      = unary (("<" | "<=" | ">" | ">=" | "contains") unary)*
//! unary    = ("!" | "not") unary | atom
//! atom     = path | string | number | "true" | "false" | "null" | "(" expr ")"
//! path     = see crate::path (a singular JSONPath: `$.state.a[0]`)
//! string   = '…' | "…"        (JSON escapes, plus \')
//! number   = JSON number      (e.g. -1, 0.8, 1e3), compared as BigDecimal
//! ```
//!
//! Expressions are parsed when the flow is checked, so a syntax error is a
//! check diagnostic, never a run-time surprise. Evaluation is bounded (no
//! loops, no functions, at most [`MAX_DEPTH`] nesting) and never panics.
//!
//! Evaluation rules:
//! - A path to a missing member or element is `null`; stepping into a value
//!   of the wrong kind (`.x` on a string) is an error.
//! - `==`/`!=`: anything equals `null` only if it is `null`; otherwise both
//!   sides must be the same kind (number, string, boolean, array, object), or
//!   it is a type-mismatch error. Numbers compare exactly (`0.80 == 0.8`),
//!   arrays and objects compare deeply.
//! - `< <= > >=`: two numbers (exact) or two strings (code-point order);
//!   anything else is an error.
//! - `a contains b`: substring when both are strings; element membership
//!   when `a` is an array; key membership when `a` is an object and `b` a
//!   string; `false` when `a` is null; otherwise an error.
//! - `! && ||` take booleans (short-circuit); the whole expression must
//!   yield a boolean.

use crate::path::{self, Path, Scope};
use bigdecimal::BigDecimal;
use flow_abi::number::Num;
use serde_json::Value;
use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// Longest expression source accepted, in bytes.
pub const MAX_LEN: usize = 4096;
/// Deepest nesting of the syntax tree.
pub const MAX_DEPTH: usize = 64;

/// A literal constant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lit {
    Null,
    Bool(bool),
    /// A number as written, and its exact value.
    Number(Number),
    String(String),
}

/// A number literal: its source text and exact value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Number {
    pub text: String,
    pub value: BigDecimal,
}

/// Binary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Contains,
}

impl BinOp {
    /// Binding power: higher binds tighter.
    fn power(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::Eq | BinOp::Ne => 3,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Contains => 4,
        }
    }

    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "||",
            BinOp::And => "&&",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Contains => "contains",
        }
    }
}

/// Prefix `!` binds tighter than every binary operator.
const NOT_POWER: u8 = 5;

/// The syntax tree of a condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Path(Path),
    Lit(Lit),
    Not(Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
}

/// A syntax error with the byte offset where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub offset: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at byte {})", self.message, self.offset)
    }
}

/// An evaluation failure: a type mismatch, a bad path step or a number past
/// the limits. The message names the sub-expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError {
    pub message: String,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

// ---------------------------------------------------------------- tokens

impl Expr {
    /// Parses a condition. Every syntax problem is an error with an offset.
    pub fn parse(src: &str) -> Result<Expr, ParseError> {
        if src.len() > MAX_LEN {
            return Err(perr(
                MAX_LEN,
                format!("expression longer than {MAX_LEN} bytes"),
            ));
        }
        let toks = tokenize(src)?;
        let mut p = Parser { toks, pos: 0 };
        let e = p.expr(0, 0)?;
        match p.peek() {
            Tok::End => Ok(e),
            Tok::RParen => Err(perr(p.offset(), "unmatched `)`")),
            _ => Err(perr(
                p.offset(),
                "expected an operator or the end of the expression",
            )),
        }
    }

    /// Every path the expression reads, left to right.
    pub fn paths(&self) -> Vec<&Path> {
        let mut out = Vec::new();
        self.collect_paths(&mut out);
        out
    }

    fn collect_paths<'a>(&'a self, out: &mut Vec<&'a Path>) {
        match self {
            Expr::Path(p) => out.push(p),
            Expr::Lit(_) => {}
            Expr::Not(e) => e.collect_paths(out),
            Expr::Binary(_, a, b) => {
                a.collect_paths(out);
                b.collect_paths(out);
            }
        }
    }

    /// Evaluates the condition against `scope`.
    pub fn eval(&self, scope: &Scope<'_>) -> Result<bool, EvalError> {
        match self.value(scope)? {
            Val::Bool(b) => Ok(b),
            other => Err(EvalError {
                message: format!(
                    "`{}` is {}, but a condition must be true or false",
                    self,
                    other.kind()
                ),
            }),
        }
    }

    fn value<'a>(&'a self, scope: &Scope<'a>) -> Result<Val<'a>, EvalError> {
        match self {
            Expr::Path(p) => match p.resolve(scope) {
                Ok(Some(v)) => Val::from_json(v).map_err(|m| EvalError {
                    message: format!("`{p}`: {m}"),
                }),
                Ok(None) => Ok(Val::Null),
                Err(e) => Err(EvalError { message: e.message }),
            },
            Expr::Lit(Lit::Null) => Ok(Val::Null),
            Expr::Lit(Lit::Bool(b)) => Ok(Val::Bool(*b)),
            Expr::Lit(Lit::Number(n)) => Ok(Val::Num(Cow::Borrowed(&n.value))),
            Expr::Lit(Lit::String(s)) => Ok(Val::Str(s)),
            Expr::Not(e) => Ok(Val::Bool(!e.boolean(scope)?)),
            Expr::Binary(BinOp::And, a, b) => Ok(Val::Bool(a.boolean(scope)? && b.boolean(scope)?)),
            Expr::Binary(BinOp::Or, a, b) => Ok(Val::Bool(a.boolean(scope)? || b.boolean(scope)?)),
            Expr::Binary(op, a, b) => {
                let (x, y) = (a.value(scope)?, b.value(scope)?);
                let mismatch = |what: &str| EvalError {
                    message: format!("`{}`: cannot {} {} and {}", self, what, x.kind(), y.kind()),
                };
                match op {
                    BinOp::Eq | BinOp::Ne => {
                        let eq = x.equals(&y).ok_or_else(|| mismatch("compare"))?;
                        Ok(Val::Bool(eq == (*op == BinOp::Eq)))
                    }
                    BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                        let o = match (&x, &y) {
                            (Val::Num(m), Val::Num(n)) => m.as_ref().cmp(n.as_ref()),
                            (Val::Str(m), Val::Str(n)) => m.cmp(n),
                            _ => return Err(mismatch("order")),
                        };
                        Ok(Val::Bool(match op {
                            BinOp::Lt => o == Ordering::Less,
                            BinOp::Le => o != Ordering::Greater,
                            BinOp::Gt => o == Ordering::Greater,
                            _ => o != Ordering::Less,
                        }))
                    }
                    BinOp::Contains => match (&x, &y) {
                        (Val::Null, _) => Ok(Val::Bool(false)),
                        (Val::Str(h), Val::Str(n)) => Ok(Val::Bool(h.contains(*n))),
                        (Val::Arr(items), _) => {
                            for item in items.iter() {
                                // Elements past the number limits never equal anything.
                                if let Ok(v) = Val::from_json(item)
                                    && v.equals(&y) == Some(true)
                                {
                                    return Ok(Val::Bool(true));
                                }
                            }
                            Ok(Val::Bool(false))
                        }
                        (Val::Obj(m), Val::Str(k)) => Ok(Val::Bool(m.contains_key(*k))),
                        _ => Err(EvalError {
                            message: format!(
                                "`{}`: `contains` takes a string in a string, anything in an array, or a key in an object; got {} and {}",
                                self,
                                x.kind(),
                                y.kind()
                            ),
                        }),
                    },
                    BinOp::And | BinOp::Or => Err(mismatch("combine")),
                }
            }
        }
    }

    fn boolean(&self, scope: &Scope<'_>) -> Result<bool, EvalError> {
        match self.value(scope)? {
            Val::Bool(b) => Ok(b),
            other => Err(EvalError {
                message: format!(
                    "`{}` is {}, but `!`, `&&` and `||` take true or false",
                    self,
                    other.kind()
                ),
            }),
        }
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, min: u8) -> fmt::Result {
        match self {
            Expr::Path(p) => write!(f, "{p}"),
            Expr::Lit(Lit::Null) => f.write_str("null"),
            Expr::Lit(Lit::Bool(b)) => write!(f, "{b}"),
            Expr::Lit(Lit::Number(n)) => f.write_str(&n.text),
            Expr::Lit(Lit::String(s)) => {
                f.write_str("'")?;
                path::write_quoted_body(f, s, '\'')?;
                f.write_str("'")
            }
            Expr::Not(e) => {
                f.write_str("!")?;
                e.write(f, NOT_POWER)
            }
            Expr::Binary(op, a, b) => {
                let p = op.power();
                let paren = p < min;
                if paren {
                    f.write_str("(")?;
                }
                a.write(f, p)?;
                write!(f, " {} ", op.symbol())?;
                b.write(f, p + 1)?;
                if paren {
                    f.write_str(")")?;
                }
                Ok(())
            }
        }
    }
}

/// Prints the expression with the fewest parentheses that parse back to the
/// same tree.
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, 0)
    }
}

// ---------------------------------------------------------------- values

/// An operand value during evaluation.
enum Val<'a> {
    Null,
    Bool(bool),
    Num(Cow<'a, BigDecimal>),
    Str(&'a str),
    Arr(&'a [Value]),
    Obj(&'a serde_json::Map<String, Value>),
}

impl<'a> Val<'a> {
    fn from_json(v: &'a Value) -> Result<Val<'a>, String> {
        Ok(match v {
            Value::Null => Val::Null,
            Value::Bool(b) => Val::Bool(*b),
            Value::Number(n) => {
                Val::Num(Cow::Owned(decimal(n.as_str()).ok_or_else(|| {
                    format!("number `{}` is past flowd's limits", n.as_str())
                })?))
            }
            Value::String(s) => Val::Str(s),
            Value::Array(a) => Val::Arr(a),
            Value::Object(m) => Val::Obj(m),
        })
    }

    fn kind(&self) -> &'static str {
        match self {
            Val::Null => "null",
            Val::Bool(_) => "a boolean",
            Val::Num(_) => "a number",
            Val::Str(_) => "a string",
            Val::Arr(_) => "an array",
            Val::Obj(_) => "an object",
        }
    }

    /// `Some(equal)`, or `None` when the kinds differ and neither is null.
    fn equals(&self, other: &Val<'_>) -> Option<bool> {
        match (self, other) {
            (Val::Null, Val::Null) => Some(true),
            (Val::Null, _) | (_, Val::Null) => Some(false),
            (Val::Bool(a), Val::Bool(b)) => Some(a == b),
            (Val::Num(a), Val::Num(b)) => Some(a.as_ref() == b.as_ref()),
            (Val::Str(a), Val::Str(b)) => Some(a == b),
            (Val::Arr(a), Val::Arr(b)) => {
                Some(a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| json_eq(x, y)))
            }
            (Val::Obj(a), Val::Obj(b)) => Some(
                a.len() == b.len()
                    && a.iter()
                        .zip(b.iter())
                        .all(|((ka, va), (kb, vb))| ka == kb && json_eq(va, vb)),
            ),
            _ => None,
        }
    }
}

/// Deep equality with numbers compared by value (`1.0 == 1`).
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (Val::from_json(a), Val::from_json(b)) {
        (Ok(x), Ok(y)) => x.equals(&y) == Some(true),
        // A number past the limits equals only the same spelling.
        _ => a == b,
    }
}

mod parse;
pub use parse::decimal;
use parse::*;

#[cfg(test)]
mod tests;
