// Natural log, to about 1.2 ULP everywhere. Mesa's `log` is log2(m) + e with m in [1, 2), which
// cancels just below 1: log(0.99999994) came out 73 % too large, log(0.999) 537 ULP off. Here
// m is taken in [sqrt(1/2), sqrt(2)), so f = m - 1 is exact and small near 1, and
// log(1 + f) = 2 atanh(s) = f - f²/2 + s (f²/2 + R), s = f / (2 + f), R the atanh series'
// terms from s³ on (Taylor coefficients 2/3, 2/5, 2/7, 2/9: |s| <= 0.172, so the first term
// left out is below 2^-29 of the result). e ln 2 is added in two parts (ln2_hi has 16
// significant bits, so e * ln2_hi is exact). Subnormals are scaled by 2^64 first.
// log(±0) = -inf, log(+inf) = +inf, log(x < 0) and log(NaN) = NaN.
fn blog(x: f32) -> f32 {
    let sub = abs(x) < 1.17549435e-38;
    let b = bitcast<u32>(select(x, x * 18446744073709551616.0, sub));
    let m1 = bitcast<f32>((b & 0x007fffffu) | 0x3f800000u);
    let big = m1 > 1.41421356;
    let m = select(m1, m1 * 0.5, big);
    let e = f32(i32((b >> 23u) & 0xffu) - 127 + select(0, 1, big)) - select(0.0, 64.0, sub);
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let r = z * (0.6666667 + z * (0.4 + z * (0.2857143 + z * 0.22222222)));
    let hfsq = 0.5 * f * f;
    let y = e * 0.693145751953125 + ((f - hfsq) + (s * (hfsq + r) + e * 1.4286068e-06));
    let ub = bitcast<u32>(x);
    // -inf and NaN built from x's bits (browsers reject inf and NaN constants): ±0 | 0xff800000
    // is -inf; x | 0x7fc00000 is a NaN for a negative x or a NaN.
    let special = select(select(x, bitcast<f32>(ub | 0xff800000u), (ub & 0x7fffffffu) == 0u), bitcast<f32>(ub | 0x7fc00000u), ub > 0x7f800000u && ub != 0x80000000u);
    return select(y, special, ub >= 0x7f800000u || (ub & 0x7fffffffu) == 0u);
}
