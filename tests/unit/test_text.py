"""Stored text as a person reads it (domain/text.py)."""

import pytest

from denpyo.domain.text import age, visible


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("order:7", "order:7"),
        ("a\nb\rc\td", "a\\nb\\rc\\td"),
        ("\x1b]0;owned\x07\x1b[2J", "\\x1b]0;owned\\x07\\x1b[2J"),
        ("\x00 \x1f \x7f \x80 \x85 \x9b \x9f", "\\x00 \\x1f \\x7f \\x80 \\x85 \\x9b \\x9f"),
        ("請求書 ü € \xa0 [/] C:\\path", "請求書 ü € \xa0 [/] C:\\path"),
        ("", ""),
    ],
)
def test_control_characters_are_escaped_as_python_writes_them(stored: str, shown: str) -> None:
    """C0, DEL and C1 as in a Python string's repr; printable text (any script,
    backslashes, brackets) as is."""
    assert visible(stored) == shown


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (None, "-"),
        (42, "42 s"),
        (600, "10 min"),
        (4800, "1 h"),
        (9600, "3 h"),
        (86_400, "24 h"),
        (3 * 86_400, "3 days"),
    ],
)
def test_a_duration_as_the_command_line_and_the_log_say_it(
    seconds: float | None, said: str
) -> None:
    assert age(seconds) == said
