//! The byte cursor the parsers and the typed decoder drive: one pass over
//! JSON text, no intermediate tree, canonical form tracked as it reads.

use super::*;

/// What kind of JSON value starts at the cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

/// A byte cursor over JSON text; the typed decoder drives it directly so a
/// typed decode is one pass with no intermediate tree.
pub(crate) struct Cursor<'a> {
    text: &'a str,
    src: &'a [u8],
    pos: usize,
    depth: usize,
    /// Whether the text read so far is canonical (see
    /// [`parse_checking_canonical`]).
    pub(super) canonical: bool,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(text: &'a str) -> Cursor<'a> {
        Cursor {
            text,
            src: text.as_bytes(),
            pos: 0,
            depth: 0,
            canonical: true,
        }
    }

    fn ws(&mut self) {
        while let Some(&b) = self.src.get(self.pos) {
            if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                self.canonical = false;
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    pub(crate) fn syntax(&self, what: &str) -> DecodeError {
        DecodeError::new(format!("invalid JSON at byte {}: {what}", self.pos))
    }

    /// The kind of the next value, after white space.
    pub(crate) fn kind(&mut self) -> Result<Kind, DecodeError> {
        self.ws();
        match self.src.get(self.pos) {
            Some(b'n') => Ok(Kind::Null),
            Some(b't' | b'f') => Ok(Kind::Bool),
            Some(b'"') => Ok(Kind::String),
            Some(b'[') => Ok(Kind::Array),
            Some(b'{') => Ok(Kind::Object),
            Some(b'-' | b'0'..=b'9') => Ok(Kind::Number),
            Some(_) => Err(self.syntax("expected a value")),
            None => Err(self.syntax("unexpected end of input")),
        }
    }

    /// After the last value: only white space may follow.
    pub(crate) fn end(&mut self) -> Result<(), DecodeError> {
        self.ws();
        if self.pos == self.src.len() {
            Ok(())
        } else {
            Err(self.syntax("unexpected text after the value"))
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        self.ws();
        if self.src.get(self.pos) == Some(&b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub(crate) fn null(&mut self) -> Result<(), DecodeError> {
        self.ws();
        if self.src[self.pos..].starts_with(b"null") {
            self.pos += 4;
            Ok(())
        } else {
            Err(self.syntax("expected null"))
        }
    }

    pub(crate) fn bool(&mut self) -> Result<bool, DecodeError> {
        self.ws();
        if self.src[self.pos..].starts_with(b"true") {
            self.pos += 4;
            Ok(true)
        } else if self.src[self.pos..].starts_with(b"false") {
            self.pos += 5;
            Ok(false)
        } else {
            Err(self.syntax("expected true or false"))
        }
    }

    /// Reads a number token and judges its grammar (not yet its limits).
    pub(crate) fn number(&mut self) -> Result<Num, DecodeError> {
        self.ws();
        let start = self.pos;
        while let Some(&b) = self.src.get(self.pos) {
            if matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                self.pos += 1;
            } else {
                break;
            }
        }
        Num::parse(&self.src[start..self.pos]).map_err(|e| match e {
            crate::number::NumError::Syntax => {
                DecodeError::new(format!("invalid JSON at byte {start}: malformed number"))
            }
            crate::number::NumError::ExponentRange => {
                DecodeError::new("number's exponent is out of range")
            }
        })
    }

    /// Reads a string. Refuses raw control characters, unknown escapes, lone
    /// surrogates and texts longer than [`limits::MAX_TEXT_BYTES`].
    pub(crate) fn string(&mut self) -> Result<String, DecodeError> {
        self.string_cow().map(Cow::into_owned)
    }

    /// [`Cursor::string`], borrowed from the text when it holds no escape.
    pub(crate) fn string_cow(&mut self) -> Result<Cow<'a, str>, DecodeError> {
        self.ws();
        if self.src.get(self.pos) != Some(&b'"') {
            return Err(self.syntax("expected a string"));
        }
        self.pos += 1;
        // Most strings escape nothing: find where the plain bytes end,
        // eight at a time, and when that is the closing quote copy them
        // at once.
        let start = self.pos;
        let mut end = start;
        while let Some(chunk) = self.src.get(end..end + 8)
            && let Ok(word) = <[u8; 8]>::try_from(chunk)
            && !any_needs_escape(u64::from_le_bytes(word))
        {
            end += 8;
        }
        while self
            .src
            .get(end)
            .is_some_and(|&b| !NEEDS_ESCAPE[usize::from(b)])
        {
            end += 1;
        }
        if end - start > limits::MAX_TEXT_BYTES {
            return Err(DecodeError::new(format!(
                "text longer than the limit of {} bytes",
                limits::MAX_TEXT_BYTES
            )));
        }
        // `end` is at an ASCII byte or the end: a char boundary.
        if self.src.get(end) == Some(&b'"') {
            self.pos = end + 1;
            return Ok(Cow::Borrowed(&self.text[start..end]));
        }
        let mut out = String::with_capacity(end - start + 16);
        out.push_str(&self.text[start..end]);
        self.pos = end;
        let mut run = self.pos;
        loop {
            let Some(&b) = self.src.get(self.pos) else {
                return Err(self.syntax("unterminated string"));
            };
            match b {
                b'"' => {
                    out.push_str(&self.text[run..self.pos]);
                    self.pos += 1;
                    break;
                }
                b'\\' => {
                    out.push_str(&self.text[run..self.pos]);
                    self.pos += 1;
                    self.escape(&mut out)?;
                    run = self.pos;
                }
                0..=0x1f => return Err(self.syntax("control character in string")),
                _ => self.pos += 1,
            }
            if self.pos - run + out.len() > limits::MAX_TEXT_BYTES {
                return Err(DecodeError::new(format!(
                    "text longer than the limit of {} bytes",
                    limits::MAX_TEXT_BYTES
                )));
            }
        }
        Ok(Cow::Owned(out))
    }

    fn escape(&mut self, out: &mut String) -> Result<(), DecodeError> {
        let Some(&b) = self.src.get(self.pos) else {
            return Err(self.syntax("unterminated escape"));
        };
        self.pos += 1;
        let c = match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => {
                self.canonical = false;
                '/'
            }
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                // Canonical only for a control without a short form, in
                // lowercase hex (write_str).
                let lower = !self.src[self.pos..]
                    .iter()
                    .take(4)
                    .any(u8::is_ascii_uppercase);
                let hi = self.hex4()?;
                if !(lower && hi < 0x20 && !matches!(hi, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d)) {
                    self.canonical = false;
                }
                if (0xD800..0xDC00).contains(&hi) {
                    if !(self.src.get(self.pos) == Some(&b'\\')
                        && self.src.get(self.pos + 1) == Some(&b'u'))
                    {
                        return Err(self.syntax("lone surrogate in \\u escape"));
                    }
                    self.pos += 2;
                    let lo = self.hex4()?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return Err(self.syntax("lone surrogate in \\u escape"));
                    }
                    let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                    char::from_u32(cp).ok_or_else(|| self.syntax("invalid \\u escape"))?
                } else if (0xDC00..0xE000).contains(&hi) {
                    return Err(self.syntax("lone surrogate in \\u escape"));
                } else {
                    char::from_u32(hi).ok_or_else(|| self.syntax("invalid \\u escape"))?
                }
            }
            _ => return Err(self.syntax("unknown escape")),
        };
        out.push(c);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, DecodeError> {
        let Some(digits) = self.src.get(self.pos..self.pos + 4) else {
            return Err(self.syntax("short \\u escape"));
        };
        let mut v = 0u32;
        for &d in digits {
            let h = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                b'A'..=b'F' => d - b'A' + 10,
                _ => return Err(self.syntax("bad hex digit in \\u escape")),
            };
            v = v * 16 + u32::from(h);
        }
        self.pos += 4;
        Ok(v)
    }

    fn enter(&mut self) -> Result<(), DecodeError> {
        self.depth += 1;
        if self.depth > limits::MAX_DEPTH {
            return Err(DecodeError::new(format!(
                "nesting deeper than the limit of {}",
                limits::MAX_DEPTH
            )));
        }
        Ok(())
    }

    /// Walks an object: `f` is called with each key, the cursor at its value,
    /// and must consume the value. Errors from `f` gain the key in their path.
    /// Duplicate keys are the caller's to refuse (it knows its key set).
    pub(crate) fn object(
        &mut self,
        mut f: impl FnMut(&mut Self, Cow<'a, str>) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        if !self.eat(b'{') {
            return Err(self.syntax("expected an object"));
        }
        self.enter()?;
        if !self.eat(b'}') {
            loop {
                self.ws();
                let key_at = self.pos;
                let key = self.string_cow()?;
                if !self.eat(b':') {
                    return Err(self.syntax("expected ':' after an object key").at_key(&key));
                }
                // The key moves into `f`; only an error needs it again, and
                // then it is read again rather than copied for every member.
                if let Err(e) = f(self, key) {
                    let mut again = Cursor::new(self.text);
                    again.pos = key_at;
                    return Err(e.at_key(&again.string().unwrap_or_default()));
                }
                if self.eat(b',') {
                    continue;
                }
                if self.eat(b'}') {
                    break;
                }
                return Err(self.syntax("expected ',' or '}' in an object"));
            }
        }
        self.depth -= 1;
        Ok(())
    }

    /// Walks an array: `f` is called with each index, the cursor at the
    /// element, and must consume it.
    pub(crate) fn array(
        &mut self,
        mut f: impl FnMut(&mut Self, usize) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        if !self.eat(b'[') {
            return Err(self.syntax("expected an array"));
        }
        self.enter()?;
        if !self.eat(b']') {
            let mut i = 0;
            loop {
                if let Err(e) = f(self, i) {
                    return Err(e.at_index(i));
                }
                i += 1;
                if self.eat(b',') {
                    continue;
                }
                if self.eat(b']') {
                    break;
                }
                return Err(self.syntax("expected ',' or ']' in an array"));
            }
        }
        self.depth -= 1;
        Ok(())
    }

    /// Reads an object's members in key order, refusing duplicate keys.
    /// Keys in ascending order (as canonical text has them) are distinct
    /// by that alone: each is compared with the one before. Out of order,
    /// the members are sorted once read and neighbours compared.
    pub(super) fn members(&mut self) -> Result<Members<'a>, DecodeError> {
        // A fact has at most a dozen members: one allocation, no growth.
        let mut m: Members<'a> = Vec::with_capacity(12);
        let mut sorted = true;
        self.object(|c, key| {
            if sorted && m.last().is_some_and(|(last, _)| *last >= key) {
                sorted = false;
                c.canonical = false;
            }
            let v = c.any()?;
            m.push((key, v));
            Ok(())
        })?;
        if !sorted {
            m.sort_by(|a, b| a.0.cmp(&b.0));
            if let Some(w) = m.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(DecodeError::new("duplicate key").at_key(w[0].0.as_ref()));
            }
        }
        Ok(m)
    }

    /// Reads any value as a `json.Value`: numbers judged as Decimals and
    /// canonicalized, duplicate keys refused.
    pub(crate) fn any(&mut self) -> Result<Json, DecodeError> {
        Ok(match self.kind()? {
            Kind::Null => {
                self.null()?;
                Json::Null
            }
            Kind::Bool => Json::Bool(self.bool()?),
            Kind::String => Json::String(self.string()?),
            Kind::Number => {
                let start = self.pos;
                let end = start
                    + self.src[start..]
                        .iter()
                        .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                        .count();
                // A short number already in canonical form (as stored
                // texts hold them) is within every limit and is its own
                // text.
                let token = &self.text[start..end];
                if token.len() <= 16 && is_canonical_number(token) {
                    self.pos = end;
                    return Ok(Json::Number(Number::from_string_unchecked(
                        token.to_owned(),
                    )));
                }
                let n = self.number()?;
                n.check_decimal().map_err(DecodeError::new)?;
                let text = n.canonical();
                if text.as_bytes() != &self.src[start..self.pos] {
                    self.canonical = false;
                }
                Json::Number(Number::from_string_unchecked(text))
            }
            Kind::Array => {
                let mut items = Vec::new();
                self.array(|c, _| {
                    items.push(c.any()?);
                    Ok(())
                })?;
                Json::Array(items)
            }
            Kind::Object => Json::Object(self.map()?),
        })
    }

    /// An object as a map, each member inserted as it is read (no list
    /// gathered and sorted first): keys out of ascending order make the
    /// text not canonical, a key twice is refused.
    fn map(&mut self) -> Result<serde_json::Map<String, Json>, DecodeError> {
        let mut m = serde_json::Map::new();
        self.object(|c, key| {
            if c.canonical && m.keys().next_back().is_some_and(|last| **last >= *key) {
                c.canonical = false;
            }
            let v = c.any()?;
            match m.insert(key.into_owned(), v) {
                None => Ok(()),
                Some(_) => Err(DecodeError::new("duplicate key")),
            }
        })?;
        Ok(m)
    }

    /// Describes the value at the cursor for an error message, consuming it:
    /// `string "9.99"`, `number 1.5`, `object`, ... Long texts are cut.
    pub(crate) fn found(&mut self) -> String {
        let kind = match self.kind() {
            Ok(k) => k,
            Err(e) => return e.message().to_string(),
        };
        match kind {
            Kind::Null => "null".to_string(),
            Kind::Bool => match self.bool() {
                Ok(b) => format!("boolean {b}"),
                Err(e) => e.message().to_string(),
            },
            Kind::Number => {
                self.ws();
                let start = self.pos;
                let _ = self.number();
                format!("number {}", preview(&self.text[start..self.pos]))
            }
            Kind::String => match self.string() {
                Ok(s) => {
                    let mut quoted = String::new();
                    write_str(&preview(&s), &mut quoted);
                    format!("string {quoted}")
                }
                Err(e) => e.message().to_string(),
            },
            Kind::Array => "array".to_string(),
            Kind::Object => "object".to_string(),
        }
    }
}

/// At most 40 characters of `s`, marked when cut.
pub(super) fn preview(s: &str) -> String {
    let mut chars = s.chars();
    let head: String = chars.by_ref().take(40).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}
