"""The 95% Wilson score interval of a proportion, which every accuracy lmc reports carries."""
from __future__ import annotations

import math

Z95 = 1.96


def wilson95(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a proportion c/n, as fractions in [0, 1]:
    centre = (p̂ + z²/2n)/(1 + z²/n), half-width = z·√(p̂(1−p̂)/n + z²/4n²)/(1 + z²/n)."""
    if n <= 0:
        return (0.0, 1.0)
    p = correct / n
    d = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, centre - half), min(1.0, centre + half))
