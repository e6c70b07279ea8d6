//! Instant and Duration: exact nanosecond counts, their canonical texts and
//! their readers.
//!
//! host-boundary.txt, "The canonical form": "Instant in UTC with the Z suffix
//! and the fewest fractional-second digits that are exact, on the proleptic
//! Gregorian calendar with no leap seconds, a year outside 0000 to 9999
//! written with a sign and at least four digits (+10000-01-01T00:00:00Z);
//! Duration as PT seconds S, the seconds a number written as above, with the
//! same rule for the fraction (PT90S, PT0.25S, PT-5S)."
//!
//! Calendar arithmetic is `time`'s (with `large-dates`, years ±999,999);
//! the texts are written and read here, since no RFC 3339 reader accepts
//! signed years.

use std::fmt;
use time::{Date, Month};

const NANOS_PER_SEC: i128 = 1_000_000_000;
const NANOS_PER_DAY: i128 = 86_400 * NANOS_PER_SEC;
/// Julian day number of 1970-01-01.
const UNIX_EPOCH_JD: i128 = 2_440_588;

/// A point in time: nanoseconds since 1970-01-01T00:00:00Z, no leap seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    nanos: i128,
}

/// A signed span of time in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration {
    nanos: i128,
}

impl Instant {
    /// The instant `nanos` after the epoch, if its year is within ±999,999.
    pub fn from_unix_nanos(nanos: i128) -> Option<Instant> {
        let days = nanos.div_euclid(NANOS_PER_DAY);
        let jd = i32::try_from(days + UNIX_EPOCH_JD).ok()?;
        Date::from_julian_day(jd).ok()?;
        Some(Instant { nanos })
    }

    pub fn unix_nanos(self) -> i128 {
        self.nanos
    }

    /// Reads an RFC 3339 date-time, also with a signed year of four or more
    /// digits. Offsets are applied to reach UTC; second 60 is refused.
    pub fn parse(s: &str) -> Result<Instant, String> {
        let bad = || format!("not an RFC 3339 date-time: {s:?}");
        let b = s.as_bytes();
        let mut i = 0;
        let sign = match b.first() {
            Some(b'+') => {
                i += 1;
                1
            }
            Some(b'-') => {
                i += 1;
                -1
            }
            _ => 0,
        };
        let ystart = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let ylen = i - ystart;
        // Unsigned years have exactly 4 digits; signed ones at least 4.
        if ylen < 4 || (sign == 0 && ylen != 4) || ylen > 6 {
            return Err(bad());
        }
        let year: i32 = s[ystart..i].parse().map_err(|_| bad())?;
        let year = if sign < 0 { -year } else { year };
        let rest = &b[i..];
        // -MM-DDTHH:MM:SS
        if rest.len() < 15
            || rest[0] != b'-'
            || rest[3] != b'-'
            || !matches!(rest[6], b'T' | b't')
            || rest[9] != b':'
            || rest[12] != b':'
        {
            return Err(bad());
        }
        let two = |at: usize| -> Result<u8, String> {
            let (x, y) = (rest[at], rest[at + 1]);
            if x.is_ascii_digit() && y.is_ascii_digit() {
                Ok((x - b'0') * 10 + (y - b'0'))
            } else {
                Err(bad())
            }
        };
        let (month, day, hour, minute, second) = (two(1)?, two(4)?, two(7)?, two(10)?, two(13)?);
        if hour > 23 || minute > 59 || second > 59 {
            return Err(bad());
        }
        let month = Month::try_from(month).map_err(|_| bad())?;
        let date = Date::from_calendar_date(year, month, day).map_err(|_| bad())?;
        let mut j = 15;
        let mut frac: i128 = 0;
        if rest.get(j) == Some(&b'.') {
            j += 1;
            let start = j;
            while j < rest.len() && rest[j].is_ascii_digit() {
                j += 1;
            }
            let digits = &rest[start..j];
            if digits.is_empty() {
                return Err(bad());
            }
            let (kept, dropped) = digits.split_at(digits.len().min(9));
            if dropped.iter().any(|&d| d != b'0') {
                return Err(format!("date-time finer than a nanosecond: {s:?}"));
            }
            for &d in kept {
                frac = frac * 10 + i128::from(d - b'0');
            }
            frac *= 10i128.pow(9 - kept.len() as u32);
        }
        let offset_secs: i128 = match &rest[j..] {
            [b'Z' | b'z'] => 0,
            [sg @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
                let d = |x: u8| -> Result<i128, String> {
                    if x.is_ascii_digit() {
                        Ok(i128::from(x - b'0'))
                    } else {
                        Err(bad())
                    }
                };
                let (oh, om) = (d(*h1)? * 10 + d(*h2)?, d(*m1)? * 10 + d(*m2)?);
                if oh > 23 || om > 59 {
                    return Err(bad());
                }
                let secs = oh * 3600 + om * 60;
                if *sg == b'-' { -secs } else { secs }
            }
            _ => return Err(bad()),
        };
        let days = i128::from(date.to_julian_day()) - UNIX_EPOCH_JD;
        let secs = i128::from(hour) * 3600 + i128::from(minute) * 60 + i128::from(second);
        let nanos = days * NANOS_PER_DAY + (secs - offset_secs) * NANOS_PER_SEC + frac;
        Instant::from_unix_nanos(nanos).ok_or_else(|| format!("date-time out of range: {s:?}"))
    }
}

impl fmt::Display for Instant {
    /// The canonical text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = self.nanos.div_euclid(NANOS_PER_DAY);
        let in_day = self.nanos.rem_euclid(NANOS_PER_DAY);
        // The constructor checked the range.
        let date = i32::try_from(days + UNIX_EPOCH_JD)
            .ok()
            .and_then(|jd| Date::from_julian_day(jd).ok())
            .ok_or(fmt::Error)?;
        let year = date.year();
        if (0..=9999).contains(&year) {
            write!(f, "{year:04}")?;
        } else if year > 9999 {
            write!(f, "+{year:04}")?;
        } else {
            write!(f, "-{:04}", -i64::from(year))?;
        }
        let secs = in_day / NANOS_PER_SEC;
        write!(
            f,
            "-{:02}-{:02}T{:02}:{:02}:{:02}",
            u8::from(date.month()),
            date.day(),
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )?;
        write_fraction(f, in_day % NANOS_PER_SEC)?;
        f.write_str("Z")
    }
}

/// `.d…` with the fewest exact digits, or nothing for a whole second.
fn write_fraction(f: &mut fmt::Formatter<'_>, nanos: i128) -> fmt::Result {
    if nanos == 0 {
        return Ok(());
    }
    let digits = format!("{nanos:09}");
    write!(f, ".{}", digits.trim_end_matches('0'))
}

impl Duration {
    pub fn from_nanos(nanos: i128) -> Duration {
        Duration { nanos }
    }

    pub fn nanos(self) -> i128 {
        self.nanos
    }

    /// Reads an ISO 8601 duration of exact length: `PT90S`, `PT0.25S`,
    /// `PT-5S` (the canonical forms), and `P[nW][nD][T[nH][nM][nS]]` with
    /// a week of 7 days and a day of 86,400 seconds. Years and months have
    /// no fixed length and are refused; so is a fraction finer than a
    /// nanosecond, or a magnitude past ±10^18 seconds.
    pub fn parse(s: &str) -> Result<Duration, String> {
        let bad = || format!("not an ISO 8601 duration: {s:?}");
        let (neg_all, body) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let body = body.strip_prefix('P').ok_or_else(bad)?;
        let mut total: i128 = 0;
        let mut in_time = false;
        let mut any = false;
        let mut rest = body;
        let mut last_rank = 0u8;
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('T') {
                if in_time {
                    return Err(bad());
                }
                in_time = true;
                rest = r;
                continue;
            }
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
                .ok_or_else(bad)?;
            let (num, unit_rest) = rest.split_at(end);
            let unit_char = unit_rest.chars().next().ok_or_else(bad)?;
            rest = &unit_rest[unit_char.len_utf8()..];
            let unit = u8::try_from(unit_char).map_err(|_| bad())?;
            let (rank, secs_per_unit): (u8, i128) = match (in_time, unit) {
                (false, b'W') => (1, 7 * 86_400),
                (false, b'D') => (2, 86_400),
                (true, b'H') => (3, 3600),
                (true, b'M') => (4, 60),
                (true, b'S') => (5, 1),
                (false, b'Y' | b'M') => {
                    return Err(format!(
                        "duration in years or months has no fixed length: {s:?}"
                    ));
                }
                _ => return Err(bad()),
            };
            if rank <= last_rank {
                return Err(bad());
            }
            last_rank = rank;
            // Only the seconds may be signed or fractional (canonical form).
            if rank != 5 && !num.bytes().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            let n = crate::number::Num::parse(num.as_bytes()).map_err(|_| bad())?;
            // Each part fits an i128 on its own; their sum may not.
            total = num_to_nanos(&n, secs_per_unit)
                .and_then(|part| total.checked_add(part))
                .ok_or_else(|| {
                    format!("duration out of range or finer than a nanosecond: {s:?}")
                })?;
            any = true;
        }
        if !any || (in_time && last_rank < 3) {
            return Err(bad());
        }
        if total.unsigned_abs() > 1_000_000_000_000_000_000 * NANOS_PER_SEC as u128 {
            return Err(format!("duration out of range: {s:?}"));
        }
        Ok(Duration {
            nanos: if neg_all { -total } else { total },
        })
    }
}

/// `n × unit seconds` in nanoseconds, if exact and of sane size.
fn num_to_nanos(n: &crate::number::Num, secs_per_unit: i128) -> Option<i128> {
    if n.is_zero() {
        return Some(0);
    }
    if n.significant_digits() > 30 {
        return None;
    }
    let mut mant: i128 = 0;
    for &d in n.digits() {
        mant = mant * 10 + i128::from(d - b'0');
    }
    // value in nanoseconds = mant × 10^(exp + 9) × unit
    let e = n.exponent().checked_add(9)?;
    let scaled = if e >= 0 {
        if e > 30 {
            return None;
        }
        mant.checked_mul(10i128.checked_pow(e as u32)?)?
            .checked_mul(secs_per_unit)?
    } else {
        let div = 10i128.checked_pow(u32::try_from(-e).ok()?)?;
        let v = mant.checked_mul(secs_per_unit)?;
        if v % div != 0 {
            return None;
        }
        v / div
    };
    Some(if n.is_negative() { -scaled } else { scaled })
}

impl fmt::Display for Duration {
    /// The canonical text: `PT<seconds>S`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        let whole = abs / NANOS_PER_SEC as u128;
        write!(f, "PT{sign}{whole}")?;
        write_fraction(f, (abs % NANOS_PER_SEC as u128) as i128)?;
        f.write_str("S")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(s: &str) -> String {
        Instant::parse(s).unwrap().to_string()
    }

    #[test]
    fn instants() {
        assert_eq!(
            inst("2026-11-30T03:26:15.500+01:00"),
            "2026-11-30T02:26:15.5Z"
        );
        assert_eq!(inst("2026-11-30T03:26:15.000Z"), "2026-11-30T03:26:15Z");
        assert_eq!(inst("+10000-01-01T00:00:00Z"), "+10000-01-01T00:00:00Z");
        assert_eq!(
            inst("-0001-12-31T23:59:59.000000001Z"),
            "-0001-12-31T23:59:59.000000001Z"
        );
        assert_eq!(inst("0000-01-01T00:00:00Z"), "0000-01-01T00:00:00Z");
        assert_eq!(inst("1969-12-31T23:59:59.25Z"), "1969-12-31T23:59:59.25Z");
        // Crossing a year boundary through an offset.
        assert_eq!(inst("9999-12-31T23:30:00-01:00"), "+10000-01-01T00:30:00Z");
        for bad in [
            "2026-02-30T00:00:00Z",
            "yesterday",
            "2026-11-30 03:26:15Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T23:59:60Z",
            "2026-11-30T23:59:59",
            "10000-01-01T00:00:00Z",
            "2026-11-30T23:59:59.1234567891Z",
            "2026-11-30T23:59:59.Z",
        ] {
            assert!(Instant::parse(bad).is_err(), "{bad}");
        }
    }

    fn dur(s: &str) -> String {
        Duration::parse(s).unwrap().to_string()
    }

    #[test]
    fn durations() {
        assert_eq!(dur("PT90S"), "PT90S");
        assert_eq!(dur("PT0.250S"), "PT0.25S");
        assert_eq!(dur("PT-5S"), "PT-5S");
        assert_eq!(dur("PT1M30S"), "PT90S");
        assert_eq!(dur("P1DT1H"), "PT90000S");
        assert_eq!(dur("-PT0.5S"), "PT-0.5S");
        assert_eq!(dur("PT0S"), "PT0S");
        for bad in [
            "P1Y",
            "P1M",
            "PT",
            "P",
            "90S",
            "PT1.0000000001S",
            "PT1S1M",
            "PTS",
            "PT5é",
            "PT1e2S",
        ] {
            assert!(Duration::parse(bad).is_err(), "{bad}");
        }
    }
}
