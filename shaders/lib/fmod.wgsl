// ldexp in three steps: llvmpipe's ldexp overflows for exponents above 127 even when the
// result is finite (a subnormal y times 2^260).
fn bldexp3(y: f32, k: i32) -> f32 { let a = k / 3; return ldexp(ldexp(ldexp(y, a), a), k - 2 * a); }
fn bfmod(a: f32, b: f32) -> f32 {
    // Special cases by bits (compares cannot see NaN on every backend): fmod(x, 0), fmod(±inf, y)
    // and NaN operands give NaN; fmod(finite x, ±inf) is x.
    let ux = bitcast<u32>(a) & 0x7fffffffu;
    let uy = bitcast<u32>(b) & 0x7fffffffu;
    if (uy == 0u || ux >= 0x7f800000u || uy > 0x7f800000u) { return bf32_bits(0x7fc00000u); }
    if (uy == 0x7f800000u) { return a; }
    let x = bitcast<f32>(ux);
    let y = bitcast<f32>(uy);
    if (x < y) { return a; }
    var k: i32 = max(i32((ux >> 23u) & 0xffu) - i32((uy >> 23u) & 0xffu), 0);
    while (k > 0 && bldexp3(y, k) > x) { k = k - 1; }
    // No cap at 254: a subnormal y needs shifts up to 277; an overflowing shift (inf) stops it.
    while (k < 300 && bldexp3(y, k + 1) <= x) { k = k + 1; }
    var r = x;
    for (var j: i32 = k; j >= 0; j = j - 1) {
        let t = bldexp3(y, j);
        if (r >= t) { r = r - t; }
    }
    return select(r, -r, (bitcast<u32>(a) >> 31u) == 1u);
}
