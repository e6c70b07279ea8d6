"""Instant and Duration (ENC-16, ENC-17): exact nanoseconds, the canonical
texts and the readers' refusals, as abi/src/temporal.rs."""

import datetime as dt

import pytest

from flowd_toolkit import Duration, Instant


@pytest.mark.parametrize(
    "text,canon",
    [
        ("2026-11-30T03:26:15.500+01:00", "2026-11-30T02:26:15.5Z"),
        ("2026-11-30T03:26:15.000Z", "2026-11-30T03:26:15Z"),
        ("+10000-01-01T00:00:00Z", "+10000-01-01T00:00:00Z"),
        ("-0001-12-31T23:59:59.000000001Z", "-0001-12-31T23:59:59.000000001Z"),
        ("0000-01-01T00:00:00Z", "0000-01-01T00:00:00Z"),
        ("1969-12-31T23:59:59.25Z", "1969-12-31T23:59:59.25Z"),
        ("9999-12-31T23:30:00-01:00", "+10000-01-01T00:30:00Z"),
        ("2024-02-29t12:00:00z", "2024-02-29T12:00:00Z"),
        ("-999999-01-01T00:00:00Z", "-999999-01-01T00:00:00Z"),
        ("+999999-12-31T23:59:59.999999999Z", "+999999-12-31T23:59:59.999999999Z"),
        ("2026-01-01T00:00:00.1234567890Z", "2026-01-01T00:00:00.123456789Z"),
    ],
)
def test_instants(text, canon):
    assert str(Instant.parse(text)) == canon


@pytest.mark.parametrize(
    "bad",
    [
        "2026-02-30T00:00:00Z",
        "2023-02-29T00:00:00Z",
        "yesterday",
        "2026-11-30 03:26:15Z",
        "2026-11-30T24:00:00Z",
        "2026-11-30T23:59:60Z",
        "2026-11-30T23:59:59",
        "10000-01-01T00:00:00Z",
        "2026-11-30T23:59:59.1234567891Z",
        "2026-11-30T23:59:59.Z",
        "+999999-12-31T23:59:59-01:00",
        "2026-11-30T23:59:59+24:00",
        "２026-11-30T23:59:59Z",
        "+1234567-01-01T00:00:00Z",
    ],
)
def test_instants_refused(bad):
    with pytest.raises(ValueError):
        Instant.parse(bad)


def test_instant_and_datetime():
    i = Instant.parse("2026-11-30T02:26:15.5Z")
    assert i.to_datetime() == dt.datetime(2026, 11, 30, 2, 26, 15, 500000, tzinfo=dt.timezone.utc)
    cet = dt.timezone(dt.timedelta(hours=1))
    assert Instant.from_datetime(dt.datetime(2026, 11, 30, 3, 26, 15, 500000, tzinfo=cet)) == i
    with pytest.raises(ValueError, match="naive"):
        Instant.from_datetime(dt.datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="nanoseconds"):
        Instant.parse("2026-01-01T00:00:00.000000001Z").to_datetime()
    with pytest.raises(ValueError):
        Instant.parse("+10000-01-01T00:00:00Z").to_datetime()
    assert Instant(1) > Instant(0) and hash(Instant(5)) == hash(Instant(5))


@pytest.mark.parametrize(
    "text,canon",
    [
        ("PT90S", "PT90S"),
        ("PT0.250S", "PT0.25S"),
        ("PT-5S", "PT-5S"),
        ("PT1M30S", "PT90S"),
        ("P1DT1H", "PT90000S"),
        ("-PT0.5S", "PT-0.5S"),
        ("PT0S", "PT0S"),
        ("P2W", "PT1209600S"),
        ("PT-0.000000001S", "PT-0.000000001S"),
        ("-PT-5S", "PT5S"),
    ],
)
def test_durations(text, canon):
    assert str(Duration.parse(text)) == canon


@pytest.mark.parametrize(
    "bad",
    [
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
        "P1DT",
        "P1.5D",
        "P01D",
        "PT1000000000000000001S",
        "P-1D",
        "PT1HT1M",
    ],
)
def test_durations_refused(bad):
    with pytest.raises(ValueError):
        Duration.parse(bad)


def test_duration_and_timedelta():
    d = Duration.parse("PT90.5S")
    assert d.to_timedelta() == dt.timedelta(seconds=90, microseconds=500000)
    assert Duration.from_timedelta(dt.timedelta(days=-1)) == Duration.parse("PT-86400S")
    with pytest.raises(ValueError):
        Duration.parse("PT0.000000001S").to_timedelta()
