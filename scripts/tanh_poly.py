#!/usr/bin/env python3
"""Fits the odd polynomial of brigade's f32 tanh (the btanh helper of the WGSL elementwise ops).

tanh(x) = x + x^3 * P(x^2) on |x| < C, P of degree 4, fitted by least squares in relative error
of tanh on Chebyshev points of [0, C]; above C the shader uses 1 - 2 / (exp(2|x|) + 1). Prints
the coefficients (lowest first, as f32) and the worst error of both branches in f32 arithmetic
(exact exp) against float64 tanh, in ULP of the result. Needs numpy.

    python3 scripts/tanh_poly.py
"""
import numpy as np

C, DEG = 0.625, 4

x = np.cos(np.linspace(0, np.pi, 4000)) * C / 2 + C / 2
x = x[x > 1e-3]
t = x * x
w = x**3 / np.tanh(x)  # relative error of tanh per unit error of P
A = np.vstack([t**k for k in range(DEG + 1)]).T
coef, *_ = np.linalg.lstsq(A * w[:, None], (np.tanh(x) - x) / x**3 * w, rcond=None)
c32 = [np.float32(c) for c in coef]

xs = np.linspace(1e-6, C, 200001).astype(np.float32)
ts = xs * xs
p = np.full_like(xs, c32[-1])
for c in reversed(c32[:-1]):
    p = (p * ts + c).astype(np.float32)
poly = (xs + xs * ts * p).astype(np.float32)
ref = np.tanh(xs.astype(np.float64))
ulp = np.spacing(ref.astype(np.float32)).astype(np.float64)
print("coefficients:", ", ".join(repr(float(c)) for c in c32))
print(f"polynomial on (0, {C}): {np.max(np.abs(poly - ref) / ulp):.2f} ULP")

xs = np.linspace(C, 12, 200001).astype(np.float32)
e = np.exp(np.float32(2) * xs).astype(np.float32)
r = (np.float32(1) - np.float32(2) / (e + np.float32(1))).astype(np.float32)
ref = np.tanh(xs.astype(np.float64))
ulp = np.spacing(ref.astype(np.float32)).astype(np.float64)
print(f"1 - 2/(exp(2x)+1) on [{C}, 12]: {np.max(np.abs(r - ref) / ulp):.2f} ULP")
