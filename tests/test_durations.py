import pytest

from components.model.durations import MAX_MS, DurationError, format_duration, parse_duration


@pytest.mark.parametrize(("text", "ms"), [
    ("1ms", 1), ("500ms", 500), ("10s", 10_000), ("5m", 300_000), ("1h", 3_600_000), ("2d", 172_800_000),
    (f"{MAX_MS}ms", MAX_MS), (" 2s ", 2_000),
    # Several parts, largest unit first: what `rabbitmq-retry parked --older-than` takes too.
    ("1m30s", 90_000), ("1h30m", 5_400_000), ("1s500ms", 1_500), ("1d2h3m4s5ms", 93_784_005),
])
def test_parses_each_unit_to_milliseconds(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize(("value", "message"), [
    ("10x", '"10x" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)'),
    ("1.5s", '"1.5s" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)'),
    ("-1s", '"-1s" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)'),
    ("", '"" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)'),
    (1000, "1000 is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)"),
    (True, "True is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)"),
    ("30s1m", '"30s1m" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)'),
    ("1m1m", '"1m1m" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)'),
    ("1m 30s", '"1m 30s" is not a duration (use 500ms, 10s, 5m, 1h, 1d or 1m30s)'),
    ("0ms", '"0ms" is out of range (1ms … 4294967295ms, about 49 days)'),
    ("1194h", '"1194h" is out of range (1ms … 4294967295ms, about 49 days)'),
    (f"{MAX_MS + 1}ms", f'"{MAX_MS + 1}ms" is out of range (1ms … 4294967295ms, about 49 days)'),
])
def test_rejects_what_is_not_a_duration_in_range(value, message):
    with pytest.raises(DurationError) as error:
        parse_duration(value)
    assert str(error.value) == message


@pytest.mark.parametrize(("ms", "text"), [(1, "1ms"), (1500, "1500ms"), (90_000, "90s"), (120_000, "2m"),
                                          (7_200_000, "2h")])
def test_formats_with_the_largest_exact_unit(ms, text):
    assert format_duration(ms) == text
    assert parse_duration(text) == ms


def test_the_stack_config_and_the_command_share_one_grammar():
    from datetime import timedelta

    from rabbitmq_retry_client.cli import duration

    for text in ("90s", "1m30s", "1h30m", "7d", "1s500ms"):
        assert duration(text) == timedelta(milliseconds=parse_duration(text))


@pytest.mark.parametrize(("ms", "text"), [(60_000.0, "1m"), (0, "0ms"), (1.5, "1.5ms"), ("soon", "soonms")])
def test_a_contracts_float_is_formatted_as_its_whole_number_and_anything_else_as_it_is(ms, text):
    """Pulumi carries a contract's numbers as floats; a value gone wrong is shown, not hidden."""
    assert format_duration(ms) == text
