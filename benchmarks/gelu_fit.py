"""The coefficient table of the emitted C's AVX-512 GELU (``sf_gelu_tab`` in
solverfuse/emit/row_helpers.py): prints it, and the fit's error against float64 over a dense sweep
simulated in float32 (the same operations as ``sf_gelu16``).

Phi(x) = 1/2 + erf(x / sqrt 2) / 2 on x clamped to [-5.5, 5.0911684] (Phi is 1.9e-8 at the lower
end, 1 - 1.8e-7 at the upper, sf_geluf's clamp) in 32 intervals of width 1/3: n = round(3 x) in
[-16, 15], r = x - n fl(1/3) (|r| <= 1/6), and per interval a degree-4 polynomial in r, least squares
at 400 Chebyshev points of the interval (widened by 0.1%), rounded to float32.

    python benchmarks/gelu_fit.py
"""
from __future__ import annotations

import math

import numpy as np

DEG, K, OFF = 4, 32, 16
THIRD = float(np.float32(1 / 3))
LO, HI = np.float32(-5.5), np.float32(5.0911684)
#: the GELU bound tests/test_emit_erf.py checks: 0.5 |x| ERF_ABS + 2 spacings of the result
ERF_ABS = 3.7e-7


def phi(x: np.ndarray) -> np.ndarray:
    """The normal CDF in float64 (math.erfc: accurate in the lower tail)."""
    return np.array([0.5 * math.erfc(-v / math.sqrt(2)) for v in np.ravel(x)])


def fit() -> np.ndarray:
    """[DEG + 1, K] float32: row j holds the coefficient of r^j of each interval."""
    tab = np.zeros((DEG + 1, K), np.float32)
    for k in range(K):
        lo, hi = max((k - 0.5 - OFF) / 3, float(LO)), min((k + 0.5 - OFF) / 3, float(HI))
        m = 1e-3 * (hi - lo)
        x = (lo + hi) / 2 + (hi - lo + 2 * m) / 2 * np.cos(np.linspace(0, np.pi, 400))
        a = np.vander(x - (k - OFF) * THIRD, DEG + 1, increasing=True)
        tab[:, k] = np.linalg.lstsq(a, phi(x), rcond=None)[0].astype(np.float32)
    return tab


def simulate(tab: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """sf_gelu16's result in float32 (each FMA rounded once)."""
    xc = np.minimum(np.maximum(xs, LO), HI)
    n = np.rint(xc.astype(np.float64) * 3.0)
    k = (n.astype(np.int64) + OFF) & (K - 1)
    r = (xc.astype(np.float64) - n * THIRD).astype(np.float32)
    p = tab[DEG][k]
    for j in range(DEG - 1, -1, -1):
        p = (p.astype(np.float64) * r + tab[j][k]).astype(np.float32)
    return (xs * p).astype(np.float32)


def _hex(v) -> str:
    """A float32 as a C hex literal, trailing zero digits dropped: 0x1.8p-2f."""
    m, e = float(v).hex().split("p")
    return (m.rstrip("0").rstrip(".") if "." in m else m) + "p" + e + "f"


def main() -> int:
    tab = fit()
    xs = np.concatenate([np.linspace(-10, 10, 400_001, dtype=np.float32),
                         np.linspace(-6, 6, 2_000_001, dtype=np.float32),
                         np.linspace(-1e-3, 1e-3, 20_001, dtype=np.float32)])
    want = xs.astype(np.float64) * phi(xs.astype(np.float64))
    bound = 0.5 * np.abs(xs) * ERF_ABS + 2 * np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    q = np.abs(simulate(tab, xs) - want) / np.maximum(bound, 1e-45)
    print(f"/* max error / bound {q.max():.3f} at x = {xs[np.argmax(q)]} */")
    print(",\n".join("    {" + ", ".join(_hex(v) for v in row) + "}" for row in tab))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
