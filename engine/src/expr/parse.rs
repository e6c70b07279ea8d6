//! Reading an expression: tokens, number literals, and the precedence
//! parser that builds an expression tree.

use super::*;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    Path(Path),
    Str(String),
    Num(Number),
    True,
    False,
    Null,
    Op(BinOp),
    Not,
    LParen,
    RParen,
    End,
}

pub(super) fn perr(offset: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        offset,
        message: message.into(),
    }
}

pub(super) fn tokenize(src: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            i += 1;
        }
        let Some(&c) = b.get(i) else {
            out.push((Tok::End, i));
            return Ok(out);
        };
        let start = i;
        let two = b.get(i + 1).copied();
        let tok = match c {
            b'$' => {
                let (p, end) = Path::parse_prefix(src, i)
                    .map_err(|e| perr(e.offset, format!("bad path: {}", e.message)))?;
                i = end;
                Tok::Path(p)
            }
            b'\'' | b'"' => {
                let (s, end) =
                    path::parse_string(src, i, c).map_err(|e| perr(e.offset, e.message))?;
                i = end;
                Tok::Str(s)
            }
            b'-' | b'0'..=b'9' => {
                let end = scan_number(b, i);
                let text = &src[i..end];
                i = end;
                Tok::Num(number(text).map_err(|m| perr(start, m))?)
            }
            b'(' => {
                i += 1;
                Tok::LParen
            }
            b')' => {
                i += 1;
                Tok::RParen
            }
            b'=' if two == Some(b'=') => {
                i += 2;
                Tok::Op(BinOp::Eq)
            }
            b'=' => return Err(perr(i, "`=` is not an operator; compare with `==`")),
            b'!' if two == Some(b'=') => {
                i += 2;
                Tok::Op(BinOp::Ne)
            }
            b'!' => {
                i += 1;
                Tok::Not
            }
            b'<' if two == Some(b'=') => {
                i += 2;
                Tok::Op(BinOp::Le)
            }
            b'<' => {
                i += 1;
                Tok::Op(BinOp::Lt)
            }
            b'>' if two == Some(b'=') => {
                i += 2;
                Tok::Op(BinOp::Ge)
            }
            b'>' => {
                i += 1;
                Tok::Op(BinOp::Gt)
            }
            b'&' if two == Some(b'&') => {
                i += 2;
                Tok::Op(BinOp::And)
            }
            b'|' if two == Some(b'|') => {
                i += 2;
                Tok::Op(BinOp::Or)
            }
            b'&' | b'|' => {
                let c = c as char;
                return Err(perr(i, format!("`{c}` is not an operator; write `{c}{c}`")));
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                while matches!(b.get(i), Some(c) if c.is_ascii_alphanumeric() || *c == b'_') {
                    i += 1;
                }
                match &src[start..i] {
                    "true" => Tok::True,
                    "false" => Tok::False,
                    "null" => Tok::Null,
                    "contains" => Tok::Op(BinOp::Contains),
                    "and" => Tok::Op(BinOp::And),
                    "or" => Tok::Op(BinOp::Or),
                    "not" => Tok::Not,
                    word => {
                        return Err(perr(
                            start,
                            format!(
                                "unknown word `{word}`; state values are paths like `$.state.{word}`, text is quoted like '{word}'"
                            ),
                        ));
                    }
                }
            }
            _ => {
                let ch = src[i..].chars().next().unwrap_or('?');
                return Err(perr(i, format!("unexpected character `{ch}`")));
            }
        };
        out.push((tok, start));
    }
}

pub(super) fn scan_number(b: &[u8], mut i: usize) -> usize {
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    while matches!(b.get(i), Some(b'0'..=b'9')) {
        i += 1;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while matches!(b.get(i), Some(b'0'..=b'9')) {
            i += 1;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        while matches!(b.get(i), Some(b'0'..=b'9')) {
            i += 1;
        }
    }
    i
}

/// Reads a JSON number token into an exact value within the Decimal limits
/// (DESIGN §2), so no comparison can blow up.
pub(super) fn number(text: &str) -> Result<Number, String> {
    let value =
        decimal(text).ok_or_else(|| format!("`{text}` is not a number within flowd's limits"))?;
    Ok(Number {
        text: text.to_string(),
        value,
    })
}

/// The exact value of a JSON number token, if it is one within the limits.
pub fn decimal(text: &str) -> Option<BigDecimal> {
    if let Some(i) = small_int(text) {
        return Some(BigDecimal::from(i));
    }
    let n = Num::parse(text.as_bytes()).ok()?;
    n.check_decimal().ok()?;
    BigDecimal::from_str(&n.canonical()).ok()
}

/// The value of a JSON integer token of at most 18 digits (`-?(0|[1-9]\d*)`,
/// what most numbers a flow compares are), read without the general
/// parse: such a token is within every limit and exact as an `i64`.
pub(super) fn small_int(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text).as_bytes();
    let plain = match digits {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.len() < 18 && rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    // Within 18 digits the parse cannot overflow.
    plain.then(|| text.parse().ok()).flatten()
}

// ---------------------------------------------------------------- parser

pub(super) struct Parser {
    pub(super) toks: Vec<(Tok, usize)>,
    pub(super) pos: usize,
}

impl Parser {
    pub(super) fn peek(&self) -> &Tok {
        self.toks.get(self.pos).map_or(&Tok::End, |(t, _)| t)
    }

    pub(super) fn offset(&self) -> usize {
        self.toks.get(self.pos).map_or(0, |(_, o)| *o)
    }

    pub(super) fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.pos < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    /// Pratt loop: parses operators binding tighter than `min`.
    pub(super) fn expr(&mut self, min: u8, depth: usize) -> Result<Expr, ParseError> {
        if depth > MAX_DEPTH {
            return Err(perr(
                self.offset(),
                format!("expression nested deeper than {MAX_DEPTH}"),
            ));
        }
        let mut lhs = self.prefix(depth)?;
        let mut chain = 0usize;
        loop {
            let op = match self.peek() {
                Tok::Op(op) if op.power() > min => *op,
                _ => return Ok(lhs),
            };
            chain += 1;
            if depth + chain > MAX_DEPTH {
                return Err(perr(
                    self.offset(),
                    format!("expression nested deeper than {MAX_DEPTH}"),
                ));
            }
            self.next();
            let rhs = self.expr(op.power(), depth + chain)?;
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(rhs));
        }
    }

    pub(super) fn prefix(&mut self, depth: usize) -> Result<Expr, ParseError> {
        let at = self.offset();
        match self.next() {
            Tok::Not => {
                if depth + 1 > MAX_DEPTH {
                    return Err(perr(
                        at,
                        format!("expression nested deeper than {MAX_DEPTH}"),
                    ));
                }
                Ok(Expr::Not(Box::new(self.expr(NOT_POWER - 1, depth + 1)?)))
            }
            Tok::LParen => {
                let e = self.expr(0, depth + 1)?;
                match self.next() {
                    Tok::RParen => Ok(e),
                    _ => Err(perr(at, "unclosed `(`")),
                }
            }
            Tok::Path(p) => Ok(Expr::Path(p)),
            Tok::Str(s) => Ok(Expr::Lit(Lit::String(s))),
            Tok::Num(n) => Ok(Expr::Lit(Lit::Number(n))),
            Tok::True => Ok(Expr::Lit(Lit::Bool(true))),
            Tok::False => Ok(Expr::Lit(Lit::Bool(false))),
            Tok::Null => Ok(Expr::Lit(Lit::Null)),
            Tok::End => Err(perr(
                at,
                "expected a value, found the end of the expression",
            )),
            Tok::RParen => Err(perr(at, "expected a value, found `)`")),
            Tok::Op(op) => Err(perr(
                at,
                format!("expected a value before `{}`", op.symbol()),
            )),
        }
    }
}
