//! Numbers held by value, never expanded before they are judged.
//!
//! host-boundary.txt, "Decoding": "A number is held to the limits by its
//! value, not its spelling: 1e5000 is an Int past the size limit however few
//! characters it takes, and is refused without being written out."
//!
//! A JSON number token is read into [`Num`]: a sign, its significant digits
//! (no leading or trailing zeros) and a decimal exponent. Every limit is then
//! a comparison of small integers; only a number that passes is written out.

use crate::limits;

/// A finite decimal number: `(-1)^neg × digits × 10^exp`, with `digits`
/// stripped of leading and trailing zeros (empty for zero, which is never
/// negative).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Num {
    neg: bool,
    digits: Vec<u8>,
    exp: i64,
}

/// Why a number token was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NumError {
    /// Not a JSON number (`NaN`, `+1`, `01`, `1.`, ...).
    Syntax,
    /// The exponent does not fit in an i64.
    ExponentRange,
}

impl Num {
    /// Reads a JSON number token (RFC 8259 grammar, nothing more).
    pub fn parse(text: &[u8]) -> Result<Num, NumError> {
        let mut i = 0;
        let neg = text.first() == Some(&b'-');
        if neg {
            i += 1;
        }
        let int_start = i;
        while i < text.len() && text[i].is_ascii_digit() {
            i += 1;
        }
        let int_digits = &text[int_start..i];
        if int_digits.is_empty() || (int_digits.len() > 1 && int_digits[0] == b'0') {
            return Err(NumError::Syntax);
        }
        let mut frac_digits: &[u8] = &[];
        if i < text.len() && text[i] == b'.' {
            i += 1;
            let start = i;
            while i < text.len() && text[i].is_ascii_digit() {
                i += 1;
            }
            frac_digits = &text[start..i];
            if frac_digits.is_empty() {
                return Err(NumError::Syntax);
            }
        }
        let mut exp: i64 = 0;
        if i < text.len() && (text[i] == b'e' || text[i] == b'E') {
            i += 1;
            let mut exp_neg = false;
            if i < text.len() && (text[i] == b'+' || text[i] == b'-') {
                exp_neg = text[i] == b'-';
                i += 1;
            }
            let start = i;
            while i < text.len() && text[i].is_ascii_digit() {
                // Accumulate negatively so i64::MIN is reachable; overflow is
                // a range error, judged without building anything.
                exp = exp
                    .checked_mul(10)
                    .and_then(|e| e.checked_sub(i64::from(text[i] - b'0')))
                    .ok_or(NumError::ExponentRange)?;
                i += 1;
            }
            if i == start {
                return Err(NumError::Syntax);
            }
            if !exp_neg {
                exp = exp.checked_neg().ok_or(NumError::ExponentRange)?;
            }
        }
        if i != text.len() {
            return Err(NumError::Syntax);
        }
        let frac_len = i64::try_from(frac_digits.len()).map_err(|_| NumError::ExponentRange)?;
        let mut exp = exp.checked_sub(frac_len).ok_or(NumError::ExponentRange)?;
        let mut digits = Vec::with_capacity(int_digits.len() + frac_digits.len());
        let lead = int_digits.iter().take_while(|&&d| d == b'0').count();
        digits.extend_from_slice(&int_digits[lead..]);
        if digits.is_empty() {
            let lead = frac_digits.iter().take_while(|&&d| d == b'0').count();
            digits.extend_from_slice(&frac_digits[lead..]);
        } else {
            digits.extend_from_slice(frac_digits);
        }
        let trail = digits.iter().rev().take_while(|&&d| d == b'0').count();
        digits.truncate(digits.len() - trail);
        if digits.is_empty() {
            return Ok(Num::zero());
        }
        exp = exp
            .checked_add(trail as i64)
            .ok_or(NumError::ExponentRange)?;
        Ok(Num { neg, digits, exp })
    }

    /// Zero.
    pub fn zero() -> Num {
        Num {
            neg: false,
            digits: Vec::new(),
            exp: 0,
        }
    }

    /// Builds a number from its parts; `digits` may carry leading or trailing
    /// zeros, which are stripped.
    pub fn from_parts(neg: bool, digits: &[u8], exp: i64) -> Num {
        let lead = digits.iter().take_while(|&&d| d == b'0').count();
        let digits = &digits[lead..];
        let trail = digits.iter().rev().take_while(|&&d| d == b'0').count();
        let kept = &digits[..digits.len() - trail];
        if kept.is_empty() {
            return Num::zero();
        }
        match exp.checked_add(trail as i64) {
            Some(exp) => Num {
                neg,
                digits: kept.to_vec(),
                exp,
            },
            // Only reachable with an exponent at i64::MAX; keep the zeros.
            None => Num {
                neg,
                digits: digits.to_vec(),
                exp,
            },
        }
    }

    pub fn is_zero(&self) -> bool {
        self.digits.is_empty()
    }

    pub fn is_negative(&self) -> bool {
        self.neg
    }

    /// Whether the value is a whole number.
    pub fn is_integer(&self) -> bool {
        self.exp >= 0 || self.digits.is_empty()
    }

    /// Count of significant digits.
    pub fn significant_digits(&self) -> usize {
        self.digits.len()
    }

    /// Count of decimal digits of the integer part of a whole number.
    pub fn integer_digits(&self) -> i128 {
        if self.digits.is_empty() {
            1
        } else {
            self.digits.len() as i128 + i128::from(self.exp)
        }
    }

    pub fn exponent(&self) -> i64 {
        self.exp
    }

    /// The significant digits, ASCII.
    pub fn digits(&self) -> &[u8] {
        &self.digits
    }

    /// Length of the canonical text, computed without writing it.
    pub fn canonical_len(&self) -> i128 {
        if self.digits.is_empty() {
            return 1;
        }
        let n = self.digits.len() as i128;
        let e = i128::from(self.exp);
        let sign = i128::from(self.neg);
        let body = if e >= 0 {
            n + e
        } else if n + e > 0 {
            n + 1
        } else {
            2 + (-(n + e)) + n
        };
        sign + body
    }

    /// The canonical text (host-boundary.txt, "The canonical form": "plain
    /// decimal notation: no exponent, no +, no leading zeros, no trailing
    /// zeros after a decimal point, no decimal point when the value is whole,
    /// and 0 for zero"). Callers check [`Num::canonical_len`] against the
    /// limit first; this writes whatever it is given.
    pub fn write_canonical(&self, out: &mut String) {
        if self.digits.is_empty() {
            out.push('0');
            return;
        }
        if self.neg {
            out.push('-');
        }
        // digits are ASCII by construction.
        let digits = std::str::from_utf8(&self.digits).unwrap_or("0");
        let n = self.digits.len() as i128;
        let e = i128::from(self.exp);
        if e >= 0 {
            out.push_str(digits);
            out.extend(std::iter::repeat_n('0', e as usize));
        } else if n + e > 0 {
            let point = (n + e) as usize;
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-(n + e)) as usize));
            out.push_str(digits);
        }
    }

    pub fn canonical(&self) -> String {
        let mut s = String::new();
        self.write_canonical(&mut s);
        s
    }

    /// Checks the limits of a Decimal (DESIGN §2): at most
    /// [`limits::MAX_DECIMAL_DIGITS`] significant digits and a canonical text
    /// of at most [`limits::MAX_NUMBER_TEXT`] characters.
    pub fn check_decimal(&self) -> Result<(), String> {
        if self.digits.len() > limits::MAX_DECIMAL_DIGITS {
            return Err(format!(
                "number has {} significant digits, more than the limit of {}",
                self.digits.len(),
                limits::MAX_DECIMAL_DIGITS
            ));
        }
        self.check_text_len()
    }

    /// Checks the limits of an Int: whole, at most [`limits::MAX_INT_DIGITS`]
    /// decimal digits.
    pub fn check_int(&self) -> Result<(), String> {
        if !self.is_integer() {
            return Err("number is not whole".to_string());
        }
        let n = self.integer_digits();
        if n > limits::MAX_INT_DIGITS as i128 {
            return Err(format!(
                "integer past the limit of {} decimal digits",
                limits::MAX_INT_DIGITS
            ));
        }
        Ok(())
    }

    fn check_text_len(&self) -> Result<(), String> {
        if self.canonical_len() > limits::MAX_NUMBER_TEXT as i128 {
            return Err(format!(
                "number's canonical text would be longer than {} characters",
                limits::MAX_NUMBER_TEXT
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        Num::parse(s.as_bytes()).unwrap().canonical()
    }

    #[test]
    fn canonical_spellings() {
        assert_eq!(canon("0"), "0");
        assert_eq!(canon("-0"), "0");
        assert_eq!(canon("-0.0e7"), "0");
        assert_eq!(canon("1e3"), "1000");
        assert_eq!(canon("1.50"), "1.5");
        assert_eq!(canon("2.5E+3"), "2500");
        assert_eq!(canon("1e-7"), "0.0000001");
        assert_eq!(canon("-12.000"), "-12");
        assert_eq!(canon("0.1e1"), "1");
        assert_eq!(canon("123.456e-1"), "12.3456");
        assert_eq!(canon("100"), "100");
        assert_eq!(canon("0.00100"), "0.001");
    }

    #[test]
    fn syntax_refused() {
        for bad in [
            "", "-", "01", "1.", ".5", "+1", "1e", "1e+", "NaN", "1x", "--1", "0x10",
        ] {
            assert!(Num::parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn huge_exponents_judged_without_expanding() {
        let n = Num::parse(b"1e5000").unwrap();
        assert!(n.check_int().is_err());
        assert!(n.check_decimal().is_err());
        let n = Num::parse(b"1e-99999999999999").unwrap();
        assert!(n.check_decimal().is_err());
        assert_eq!(
            Num::parse(b"1e99999999999999999999999"),
            Err(NumError::ExponentRange)
        );
        // Trailing zeros are not significant digits.
        let n = Num::parse(format!("1{}", "0".repeat(999)).as_bytes()).unwrap();
        assert!(n.check_int().is_ok());
        let n = Num::parse(format!("1{}", "0".repeat(1000)).as_bytes()).unwrap();
        assert!(n.check_int().is_err());
    }

    #[test]
    fn canonical_len_matches_text() {
        for s in [
            "0", "-1", "1e3", "1.25", "-0.001", "123.456", "9e-3", "-5e2",
        ] {
            let n = Num::parse(s.as_bytes()).unwrap();
            assert_eq!(n.canonical_len(), n.canonical().len() as i128, "{s}");
        }
    }
}
