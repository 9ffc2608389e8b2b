"""Kubernetes resource quantities ("8", 8, "1k", "2Gi", "1500m", "1e3") as whole GPUs.

The API server canonicalises the quantities it stores, but a watch hands the operator
whatever an object holds, and nothing that one node or pod holds may stop the
operator's picture of every other: a quantity that is no quantity counts as no GPUs.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")
_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{suffix: Decimal(1024**power) for power, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), start=1)},
}
# No node has more GPUs than this; a node that says so is believed up to here. The
# placement indexes are sized by the largest node, so a typo of "80000000" must not
# make every snapshot allocate that much.
MAX_GPUS_PER_OBJECT = 4096


def parse_quantity(value: Any) -> Decimal | None:
    """VALUE as a number, or None when it is no Kubernetes quantity."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    if match is None:
        return None
    number, exponent, suffix = match.groups()
    try:
        amount = Decimal(number)
        if exponent:
            amount = amount.scaleb(int(exponent[1:]))
        return amount * _SUFFIXES[suffix] if suffix else amount
    except ArithmeticError:  # decimal's overflow and invalid operations: "1e99999999"
        return None


def whole_gpus(value: Any, *, round_up: bool) -> int:
    """VALUE as a count of GPUs between 0 and MAX_GPUS_PER_OBJECT; 0 when it is no quantity.

    ROUND_UP for what a pod asks (part of a GPU holds a whole one), down for what a node
    offers (part of a GPU is none that a replica can use).
    """
    amount = parse_quantity(value)
    if amount is None or not amount.is_finite() or amount <= 0:
        return 0
    if amount > MAX_GPUS_PER_OBJECT:
        return MAX_GPUS_PER_OBJECT
    return math.ceil(amount) if round_up else math.floor(amount)
