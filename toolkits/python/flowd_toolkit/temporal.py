"""Instant and Duration: exact nanosecond counts, their canonical texts and
their readers (abi/src/temporal.rs, rule for rule).

``datetime`` holds microseconds and years 1 to 9999; Flow's Instant holds
nanoseconds and years -999,999 to +999,999. So a value crosses as
:class:`Instant` / :class:`Duration`, which keep every nanosecond, and
converts to and from ``datetime`` / ``timedelta`` where that is exact.

host-boundary.txt, "The canonical form": "Instant in UTC with the Z suffix
and the fewest fractional-second digits that are exact, on the proleptic
Gregorian calendar with no leap seconds, a year outside 0000 to 9999 written
with a sign and at least four digits (+10000-01-01T00:00:00Z); Duration as
PT seconds S, the seconds a number written as above, with the same rule for
the fraction (PT90S, PT0.25S, PT-5S)."
"""

import datetime as _dt
import re
import time

from .jsontext import Num

NANOS_PER_SEC = 1_000_000_000
NANOS_PER_DAY = 86_400 * NANOS_PER_SEC
MIN_YEAR, MAX_YEAR = -999_999, 999_999
_I128_MAX = (1 << 127) - 1
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def days_from_civil(y, m, d):
    """Days since 1970-01-01 of a proleptic Gregorian date."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def civil_from_days(z):
    """The proleptic Gregorian (year, month, day) of days since 1970-01-01."""
    z += 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (m <= 2), m, d


def _days_in_month(y, m):
    if m == 2:
        return 29 if y % 4 == 0 and (y % 100 != 0 or y % 400 == 0) else 28
    return 30 if m in (4, 6, 9, 11) else 31


_MIN_NANOS = days_from_civil(MIN_YEAR, 1, 1) * NANOS_PER_DAY
_MAX_NANOS = (days_from_civil(MAX_YEAR, 12, 31) + 1) * NANOS_PER_DAY - 1


def _fraction(nanos):
    return "" if nanos == 0 else "." + f"{nanos:09d}".rstrip("0")


class Instant:
    """A point in time: nanoseconds since 1970-01-01T00:00:00Z, no leap
    seconds. Ordered, hashable, immutable."""

    __slots__ = ("_nanos",)

    def __init__(self, nanos):
        if not isinstance(nanos, int) or isinstance(nanos, bool):
            raise TypeError("Instant takes integer nanoseconds since the epoch")
        if not _MIN_NANOS <= nanos <= _MAX_NANOS:
            raise ValueError("Instant out of range (years -999999 to 999999)")
        object.__setattr__(self, "_nanos", nanos)

    def __setattr__(self, name, value):
        raise AttributeError("Instant is immutable")

    @property
    def nanos(self):
        """Nanoseconds since the epoch."""
        return self._nanos

    @classmethod
    def now(cls):
        return cls(time.time_ns())

    @classmethod
    def from_datetime(cls, dt):
        """An aware ``datetime`` (a naive one says no instant)."""
        if dt.tzinfo is None or dt.utcoffset() is None:
            raise ValueError("a naive datetime is not an Instant: give it a tzinfo")
        d = dt - _EPOCH
        return cls((d.days * 86_400 + d.seconds) * NANOS_PER_SEC + d.microseconds * 1000)

    def to_datetime(self):
        """The instant as an aware UTC ``datetime``, when that is exact."""
        if self._nanos % 1000:
            raise ValueError(f"{self} has nanoseconds a datetime cannot hold; use .nanos")
        try:
            return _EPOCH + _dt.timedelta(microseconds=self._nanos // 1000)
        except OverflowError:
            raise ValueError(f"{self} is outside datetime's years 1 to 9999") from None

    @classmethod
    def parse(cls, s):
        """Reads an RFC 3339 date-time, also with a signed year of four to
        six digits; offsets are applied to reach UTC; second 60 and precision
        finer than a nanosecond are refused."""

        def bad():
            return ValueError(f"not an RFC 3339 date-time: {s!r}")

        if not s.isascii():
            raise bad()
        i, sign = 0, 0
        if s[:1] in ("+", "-"):
            sign = 1 if s[0] == "+" else -1
            i = 1
        ystart = i
        while i < len(s) and "0" <= s[i] <= "9":
            i += 1
        ylen = i - ystart
        if ylen < 4 or (sign == 0 and ylen != 4) or ylen > 6:
            raise bad()
        year = int(s[ystart:i]) * (-1 if sign < 0 else 1)
        rest = s[i:]
        if (
            len(rest) < 15
            or rest[0] != "-"
            or rest[3] != "-"
            or rest[6] not in "Tt"
            or rest[9] != ":"
            or rest[12] != ":"
        ):
            raise bad()

        def two(at):
            x = rest[at : at + 2]
            if not ("0" <= x[0] <= "9" and "0" <= x[1] <= "9"):
                raise bad()
            return int(x)

        month, day, hour, minute, second = two(1), two(4), two(7), two(10), two(13)
        if hour > 23 or minute > 59 or second > 59:
            raise bad()
        if not 1 <= month <= 12 or not 1 <= day <= _days_in_month(year, month):
            raise bad()
        j, frac = 15, 0
        if rest[j : j + 1] == ".":
            j += 1
            start = j
            while j < len(rest) and "0" <= rest[j] <= "9":
                j += 1
            digits = rest[start:j]
            if not digits:
                raise bad()
            kept, dropped = digits[:9], digits[9:]
            if dropped.strip("0"):
                raise ValueError(f"date-time finer than a nanosecond: {s!r}")
            frac = int(kept) * 10 ** (9 - len(kept))
        tail = rest[j:]
        if tail in ("Z", "z"):
            offset = 0
        elif re.fullmatch(r"[+-][0-9]{2}:[0-9]{2}", tail):
            oh, om = int(tail[1:3]), int(tail[4:6])
            if oh > 23 or om > 59:
                raise bad()
            offset = (oh * 3600 + om * 60) * (-1 if tail[0] == "-" else 1)
        else:
            raise bad()
        days = days_from_civil(year, month, day)
        secs = hour * 3600 + minute * 60 + second
        nanos = days * NANOS_PER_DAY + (secs - offset) * NANOS_PER_SEC + frac
        if not _MIN_NANOS <= nanos <= _MAX_NANOS:
            raise ValueError(f"date-time out of range: {s!r}")
        return cls(nanos)

    def __str__(self):
        """The canonical text."""
        days, in_day = divmod(self._nanos, NANOS_PER_DAY)
        y, m, d = civil_from_days(days)
        if 0 <= y <= 9999:
            year = f"{y:04d}"
        elif y > 9999:
            year = f"+{y:04d}"
        else:
            year = f"-{-y:04d}"
        secs, sub = divmod(in_day, NANOS_PER_SEC)
        return (
            f"{year}-{m:02d}-{d:02d}T{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
            + _fraction(sub)
            + "Z"
        )

    def __repr__(self):
        return f"Instant({str(self)!r})"

    def __eq__(self, other):
        return isinstance(other, Instant) and self._nanos == other._nanos

    def __lt__(self, other):
        if not isinstance(other, Instant):
            return NotImplemented
        return self._nanos < other._nanos

    def __le__(self, other):
        return self == other or self < other

    def __hash__(self):
        return hash(("Instant", self._nanos))


_MAX_DURATION_NANOS = 10**18 * NANOS_PER_SEC


class Duration:
    """A signed span of time in nanoseconds. Ordered, hashable, immutable."""

    __slots__ = ("_nanos",)

    def __init__(self, nanos):
        if not isinstance(nanos, int) or isinstance(nanos, bool):
            raise TypeError("Duration takes integer nanoseconds")
        if abs(nanos) > _MAX_DURATION_NANOS:
            raise ValueError("Duration out of range (at most 10^18 seconds either way)")
        object.__setattr__(self, "_nanos", nanos)

    def __setattr__(self, name, value):
        raise AttributeError("Duration is immutable")

    @property
    def nanos(self):
        return self._nanos

    @classmethod
    def from_timedelta(cls, td):
        return cls((td.days * 86_400 + td.seconds) * NANOS_PER_SEC + td.microseconds * 1000)

    def to_timedelta(self):
        """The span as a ``timedelta``, when that is exact."""
        if self._nanos % 1000:
            raise ValueError(f"{self} has nanoseconds a timedelta cannot hold; use .nanos")
        try:
            return _dt.timedelta(microseconds=self._nanos // 1000)
        except OverflowError:
            raise ValueError(f"{self} is longer than a timedelta can hold") from None

    @classmethod
    def parse(cls, s):
        """Reads an ISO 8601 duration of exact length: ``PT90S``, ``PT0.25S``,
        ``PT-5S`` and ``P[nW][nD][T[nH][nM][nS]]`` with a week of 7 days and
        a day of 86,400 seconds. Years and months are refused, as are a
        fraction finer than a nanosecond and a magnitude past 10^18 s."""

        def bad():
            return ValueError(f"not an ISO 8601 duration: {s!r}")

        if not s.isascii():
            raise bad()
        neg_all = s.startswith("-")
        body = s[1:] if neg_all else s
        if not body.startswith("P"):
            raise bad()
        rest = body[1:]
        total, in_time, any_part, last_rank = 0, False, False, 0
        while rest:
            if rest[0] == "T":
                if in_time:
                    raise bad()
                in_time = True
                rest = rest[1:]
                continue
            m = re.match(r"[0-9.\-]*", rest)
            end = m.end()
            if end == len(rest):
                raise bad()
            num, unit = rest[:end], rest[end]
            rest = rest[end + 1 :]
            if not in_time and unit in "YM":
                raise ValueError(f"duration in years or months has no fixed length: {s!r}")
            units = {
                (False, "W"): (1, 7 * 86_400),
                (False, "D"): (2, 86_400),
                (True, "H"): (3, 3600),
                (True, "M"): (4, 60),
                (True, "S"): (5, 1),
            }
            if (in_time, unit) not in units:
                raise bad()
            rank, secs = units[(in_time, unit)]
            if rank <= last_rank:
                raise bad()
            last_rank = rank
            # Only the seconds may be signed or fractional.
            if rank != 5 and not all("0" <= c <= "9" for c in num):
                raise bad()
            try:
                n = Num.parse(num)
            except ValueError:
                raise bad() from None
            part = _num_to_nanos(n, secs)
            total = None if part is None else total + part
            if total is None or not -(_I128_MAX + 1) <= total <= _I128_MAX:
                raise ValueError(f"duration out of range or finer than a nanosecond: {s!r}")
            any_part = True
        if not any_part or (in_time and last_rank < 3):
            raise bad()
        if abs(total) > _MAX_DURATION_NANOS:
            raise ValueError(f"duration out of range: {s!r}")
        return cls(-total if neg_all else total)

    def __str__(self):
        """The canonical text: ``PT<seconds>S``."""
        sign = "-" if self._nanos < 0 else ""
        whole, sub = divmod(abs(self._nanos), NANOS_PER_SEC)
        return f"PT{sign}{whole}{_fraction(sub)}S"

    def __repr__(self):
        return f"Duration({str(self)!r})"

    def __eq__(self, other):
        return isinstance(other, Duration) and self._nanos == other._nanos

    def __lt__(self, other):
        if not isinstance(other, Duration):
            return NotImplemented
        return self._nanos < other._nanos

    def __le__(self, other):
        return self == other or self < other

    def __hash__(self):
        return hash(("Duration", self._nanos))


def _num_to_nanos(n, secs_per_unit):
    """``n * unit seconds`` in nanoseconds if exact and within i128, as the
    Rust reader computes it (so both refuse the same texts)."""
    if not n.digits:
        return 0
    if len(n.digits) > 30:
        return None
    mant = int(n.digits)
    e = n.exp + 9
    if e >= 0:
        if e > 30:
            return None
        scaled = mant * 10**e
        if scaled > _I128_MAX:
            return None
        scaled *= secs_per_unit
        if scaled > _I128_MAX:
            return None
    else:
        if -e >= 39:  # 10^39 does not fit an i128
            return None
        div = 10 ** (-e)
        v = mant * secs_per_unit
        if v > _I128_MAX or v % div:
            return None
        scaled = v // div
    return -scaled if n.neg else scaled
