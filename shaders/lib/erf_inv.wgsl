fn bxla_log(v: f32) -> f32 {
    if (v == 0.0) { return bf32_bits(0xff800000u); }
    // NaN and negative numbers (sign bit set) by bits: no compare can be trusted with NaN.
    if (bitcast<u32>(v) > 0x7f800000u) { return bf32_bits(0xffffffffu); }
    // +inf by its bits (NaN and negatives are handled above): the literal f32::MAX is
    // rejected by browsers' WGSL compilers (Tint) as not representable.
    if (bitcast<u32>(v) == 0x7f800000u) { return v; }
    let bits = bitcast<u32>(max(v, 1.17549435e-38));
    let m = bitcast<f32>((bits & 0x807fffffu) | 0x3f000000u);
    let below = m < {{SQH}};
    let e = (f32(i32(bits >> 23u) - 127) + 1.0) - select(0.0, 1.0, below);
    var x = (m - 1.0) + select(0.0, m, below);
    let x2 = x * x;
    let x3 = x2 * x;
    var y = bfma(bfma(x, {{P0}}, {{P1}}), x, {{P2}});
    let y1 = bfma(bfma(x, {{P3}}, {{P4}}), x, {{P5}});
    let y2 = bfma(bfma(x, {{P6}}, {{P7}}), x, {{P8}});
    y = bfma(bfma(y, x3, y1), x3, y2);
    y = bfma(y, x3, e * {{LO}});
    x = bfma(x2, -0.5, x) + y;
    return bfma(e, {{HI}}, x);
}
fn bxla_log1p(x: f32) -> f32 {
    if (abs(x) < {{SMALL}}) {
        let x2 = x * x;
        let z = x * 0.0;
        let t = (x * x2) * bdiv({{NUM}}, {{DEN}});
        return x + bfma(x2, -0.5, t);
    }
    return bxla_log(x + 1.0);
}
fn berfinv(x: f32) -> f32 {
    let l = bxla_log1p(x * -x);
    let lt = l > -5.0;
    let w = select(bsqrt(-l) - 3.0, -2.5 - l, lt);
    let p = {{POLY}};
    // x * p as a fused multiply-add with -0: the same rounding, but opaque to compilers that
    // would reassociate it with a constant factor applied later (normal's sqrt(2)).
    return bfma(x, select(p, bf32_bits(0x7f800000u), abs(x) == 1.0), bitcast<f32>(0x80000000u));
}
