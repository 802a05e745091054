fn b64_clz(a: vec2<u32>) -> u32 { if (a.x != 0u) { return countLeadingZeros(a.x); } return 32u + countLeadingZeros(a.y); }
fn b64_shl(a: vec2<u32>, s: u32) -> vec2<u32> {
    if (s == 0u) { return a; }
    if (s >= 64u) { return vec2<u32>(0u, 0u); }
    if (s >= 32u) { return vec2<u32>(a.y << (s - 32u), 0u); }
    return vec2<u32>((a.x << s) | (a.y >> (32u - s)), a.y << s);
}
fn b64_shr(a: vec2<u32>, s: u32) -> vec2<u32> {
    if (s == 0u) { return a; }
    if (s >= 64u) { return vec2<u32>(0u, 0u); }
    if (s >= 32u) { return vec2<u32>(0u, a.x >> (s - 32u)); }
    return vec2<u32>(a.x >> s, (a.y >> s) | (a.x << (32u - s)));
}
fn b64_low(a: vec2<u32>, s: u32) -> vec2<u32> {
    if (s >= 64u) { return a; }
    if (s >= 32u) { return vec2<u32>(a.x & ((1u << (s - 32u)) - 1u), a.y); }
    return vec2<u32>(0u, a.y & ((1u << s) - 1u));
}
fn b64_shr_sticky(a: vec2<u32>, s: u32) -> vec2<u32> {
    if (s == 0u) { return a; }
    if (s >= 64u) { return vec2<u32>(0u, select(0u, 1u, (a.x | a.y) != 0u)); }
    let r = b64_shr(a, s);
    let l = b64_low(a, s);
    return vec2<u32>(r.x, r.y | select(0u, 1u, (l.x | l.y) != 0u));
}
fn b64_add(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { let lo = a.y + b.y; return vec2<u32>(a.x + b.x + select(0u, 1u, lo < a.y), lo); }
fn b64_sub(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return vec2<u32>(a.x - b.x - select(0u, 1u, a.y < b.y), a.y - b.y); }
fn b64_ge(a: vec2<u32>, b: vec2<u32>) -> bool { return a.x > b.x || (a.x == b.x && a.y >= b.y); }
fn bfma(a: f32, b: f32, c: f32) -> f32 {
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    let uc = bitcast<u32>(c);
    var ea = (ua >> 23u) & 0xffu;
    var eb = (ub >> 23u) & 0xffu;
    var ec = (uc >> 23u) & 0xffu;
    if (ea == 255u || eb == 255u) { return a * b + c; }
    if (ec == 255u) { return c; }
    var ma = ua & 0x7fffffu;
    var mb = ub & 0x7fffffu;
    var mc = uc & 0x7fffffu;
    if (ea == 0u) { ea = 1u; } else { ma = ma | 0x800000u; }
    if (eb == 0u) { eb = 1u; } else { mb = mb | 0x800000u; }
    if (ec == 0u) { ec = 1u; } else { mc = mc | 0x800000u; }
    if (ma == 0u || mb == 0u) { if (mc == 0u) { return a * b + c; } return c; }
    let sp = (ua ^ ub) & 0x80000000u;
    let sc = uc & 0x80000000u;
    let a1 = ma >> 16u;
    let a0 = ma & 0xffffu;
    let b1 = mb >> 16u;
    let b0 = mb & 0xffffu;
    let mid = a0 * b1 + a1 * b0;
    let p00 = a0 * b0;
    let lo = p00 + (mid << 16u);
    var p = vec2<u32>(a1 * b1 + (mid >> 16u) + select(0u, 1u, lo < p00), lo);
    let sh = b64_clz(p) - 2u;
    p = b64_shl(p, sh);
    var e = i32(ea) + i32(eb) - 300 - i32(sh);
    var s = p;
    var sign = sp;
    if (mc != 0u) {
        let shc = countLeadingZeros(mc) + 30u;
        var cc = b64_shl(vec2<u32>(0u, mc), shc);
        let ecc = i32(ec) - 150 - i32(shc);
        if (e >= ecc) { cc = b64_shr_sticky(cc, u32(e - ecc)); } else { p = b64_shr_sticky(p, u32(ecc - e)); e = ecc; }
        if (sp == sc) { s = b64_add(p, cc); } else if (b64_ge(p, cc)) { s = b64_sub(p, cc); } else { s = b64_sub(cc, p); sign = sc; }
        if (s.x == 0u && s.y == 0u) { return 0.0; }
    }
    let k = 63 - i32(b64_clz(s));
    var be = k + e + 127;
    var q = -149;
    if (be >= 1) { q = k + e - 23; }
    let r = q - e;
    var m: u32;
    if (r <= 0) {
        m = b64_shl(s, u32(-r)).y;
    } else {
        m = b64_shr(s, u32(r)).y;
        if (r <= 64) {
            let rem = b64_low(s, u32(r));
            let half = b64_shl(vec2<u32>(0u, 1u), u32(r - 1));
            if ((rem.x == half.x && rem.y == half.y && (m & 1u) == 1u) || !b64_ge(half, rem)) { m = m + 1u; }
        }
    }
    if (be >= 1) {
        if (m == 0x1000000u) { m = 0x800000u; be = be + 1; }
        if (be >= 255) { return bitcast<f32>(sign | 0x7f800000u); }
        return bitcast<f32>(sign | (u32(be) << 23u) | (m & 0x7fffffu));
    }
    return bitcast<f32>(sign | m);
}
