fn bpow(x: f32, y: f32) -> f32 {
    let ux = bitcast<u32>(x);
    let uax = ux & 0x7fffffffu;
    let uay = bitcast<u32>(y) & 0x7fffffffu;
    if (uay == 0u || ux == 0x3f800000u) { return 1.0; }
    if (uax > 0x7f800000u || uay > 0x7f800000u) { return bf32_bits(0x7fc00000u); }
    let ax = bitcast<f32>(uax);
    let neg = (ux >> 31u) == 1u;
    if (uay == 0x7f800000u) {
        if (uax == 0x3f800000u) { return 1.0; }
        return select(0.0, bf32_bits(0x7f800000u), (ax > 1.0) == (y > 0.0));
    }
    let yint = floor(y) == y;
    let yodd = yint && abs(y) < 16777216.0 && abs(y) % 2.0 == 1.0;
    var r: f32;
    if (uax == 0u || uax == 0x7f800000u) {
        r = select(0.0, bf32_bits(0x7f800000u), (ax > 1.0) == (y > 0.0));
    } else {
        if (neg && !yint) { return bf32_bits(0x7fc00000u); }
        // log2 of a subnormal, scaled first (llvmpipe's log2 does not reduce their range).
        var l = log2(ax);
        if (uax < 0x00800000u) { l = log2(ax * 18446744073709551616.0) - 64.0; }
        r = exp2(y * l);
    }
    if (neg && yodd) { r = -r; }
    return r;
}
