"""Types of the simulators' command-line options that zero does not fit.

`aisched` refuses negative, NaN and infinite numbers in every option (cli.py); a node count, an
interval or a length of time must also be above zero, or a simulation divides by it minutes in.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any


def positive(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """CONVERT (int or float), refusing anything but a finite number above zero."""

    def checked(text: str) -> Any:
        value = convert(text)
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"must be a number above zero (got {text!r})")
        return value

    checked.__name__ = convert.__name__  # argparse names the type in "invalid int value"
    return checked
