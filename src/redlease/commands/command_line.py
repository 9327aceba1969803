"""Where a command line stops being ``redlease run``'s and becomes the command's: flock's rule.

argparse cannot say it (its REMAINDER is quirky with subcommands), so the words are cut
here before argparse sees them; the options that take a value are read from the parser
itself, so the cut and the parsing never disagree.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ["split_command"]


def split_command(
    words: Sequence[str], parser: argparse.ArgumentParser
) -> tuple[list[str], list[str] | None]:
    """``run``'s own words, and the command (None if there is none), the way flock reads them.

    The command starts after ``--``, or at the first word after NAME that is not an option
    (nor the value of one), so ``redlease run NAME -n cmd -x`` runs ``cmd -x``: its options
    are its own. Which options take a value is read from ``parser``, so this rule and
    argparse never disagree; ``--opt=value``, ``-w5`` and abbreviations are understood.
    """
    takes_value = {
        option
        for action in parser._actions
        if action.option_strings and action.nargs != 0
        for option in action.option_strings
    }
    long_options = [option for action in parser._actions for option in action.option_strings]
    seen_name = False
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            return list(words[:index]), list(words[index + 1 :])
        if word.startswith("-") and word != "-":
            index += 2 if _value_follows(word, takes_value, long_options) else 1
        elif seen_name:
            return list(words[:index]), list(words[index:])
        else:
            seen_name = True
            index += 1
    return list(words), None


def _value_follows(word: str, takes_value: set[str], options: list[str]) -> bool:
    """Whether the option ``word`` takes its value from the next word."""
    if word.startswith("--"):
        if "=" in word:
            return False
        matches = [option for option in options if option.startswith(word)]
        if word in options:
            matches = [word]
        return len(matches) == 1 and matches[0] in takes_value
    for position in range(1, len(word)):  # a cluster of short options: -nv, -E3, -nE 3
        if f"-{word[position]}" in takes_value:
            return position == len(word) - 1
    return False
