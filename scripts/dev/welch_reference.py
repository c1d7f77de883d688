#!/usr/bin/env python3
"""Reference values for sweep/stats.h (tests/unit/sweep/test_stats.cpp), computed another way:
Student's t two-sided tail P(|T| >= t) by Simpson integration of the t density (math module only,
no incomplete beta function), and Welch's test of two samples from the textbook formulas.

  python3 scripts/dev/welch_reference.py      # prints the values the test checks
"""
import math


def t_density(x, df):
    c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(c - (df + 1) / 2 * math.log1p(x * x / df))


def two_sided_p(t, df, n=200000):
    # P(|T| >= t) = 1 - 2 * integral_0^|t| density (Simpson's rule, n even).
    t = abs(t)
    h = t / n
    s = t_density(0, df) + t_density(t, df)
    for i in range(1, n):
        s += (4 if i % 2 else 2) * t_density(i * h, df)
    return 1 - 2 * s * h / 3


def welch(a, b):
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    t = (ma - mb) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (len(a) - 1) + vb * vb / (len(b) - 1))
    return t, df, two_sided_p(t, df)


if __name__ == "__main__":
    for t, df in [(2.776, 4), (1.0, 1), (2.228, 10), (0.5, 3.7), (4.0, 2.5)]:
        print(f"t {t} df {df}: p {two_sided_p(t, df):.12g}")
    a, b = [2.0635, 2.2106, 2.1599], [2.0698, 2.1985, 2.1643]
    print("welch %r %r: t %.12g df %.12g p %.12g" % ((a, b) + welch(a, b)))
    a, b = [1.0, 1.2, 0.9], [2.0, 2.1, 1.95]
    print("welch %r %r: t %.12g df %.12g p %.12g" % ((a, b) + welch(a, b)))
