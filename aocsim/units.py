"""Numbers with units as people read them: one SI prefix chosen per value (296 ns, 1.09 mJ, 38.5 TOPS/W).

Every summary, table and `aocsim devices show` line prints its times, energies, powers and
efficiencies through `si`, so that no printed number is 1,000 or more before a prefixed unit, or
below 0.01 after one (a value past the prefixes' ends, below femto or above peta, keeps the last
prefix). Plot axes use matplotlib's EngFormatter, the same prefixes.
"""

from __future__ import annotations

import math

PREFIXES = ((15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"), (0, ""), (-3, "m"), (-6, "u"), (-9, "n"),
            (-12, "p"), (-15, "f"))


def si(value: float, unit: str, digits: int = 3) -> str:
    """`value` (in `unit`) with `digits` significant digits and the SI prefix that puts it in [1, 1000):
    5.54e-05 J -> '55.4 uJ', 2.506e-01 s -> '251 ms', 3.853e+13 OPS/W -> '38.5 TOPS/W', 9.997e-07 s -> '1 us'.
    Zero as '0 J'; NaN and infinities as 'nan J', 'inf J'."""
    value = float(value)
    if not prefixable(unit):  # a rate such as 1/s: a prefix would read as "k1/s"
        return f"{float(f'{value:.{digits}g}'):g} /{unit[2:]}" if unit.startswith("1/") else \
            f"{value:.{digits}g} {unit}".rstrip()
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}"
    rounded = float(f"{value:.{digits - 1}e}")  # rounded first: 999.7 n becomes 1.00 u, not 1000 n
    exponent = min(max(3 * math.floor(math.log10(abs(rounded)) / 3), PREFIXES[-1][0]), PREFIXES[0][0])
    return f"{rounded / 10.0 ** exponent:.{digits}g} {dict(PREFIXES)[exponent]}{unit}"


def prefixable(unit: str) -> bool:
    """Whether an SI prefix can stand before `unit` (W, J, s, OPS/W; not 1/s or a unit-less value)."""
    return bool(unit) and unit[0].isalpha()


def ops_per_watt(tops: float) -> str:
    """An efficiency given in TOPS/W, with its own prefix and 4 digits: 38.53 -> '38.53 TOPS/W', 0.001664 ->
    '1.664 GOPS/W'."""
    return si(tops * 1e12, "OPS/W", digits=4)
