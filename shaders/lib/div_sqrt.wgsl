fn bround_q(q: u32, sticky: bool, r: u32) -> u32 {
    if (r == 0u) { return q; }
    if (r > 31u) { return 0u; }
    let m = q >> r;
    let guard = (q >> (r - 1u)) & 1u;
    let low = (q & ((1u << (r - 1u)) - 1u)) != 0u || sticky;
    return m + select(0u, 1u, guard == 1u && (low || (m & 1u) == 1u));
}
fn bdiv(a: f32, b: f32) -> f32 {
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    var ea = i32((ua >> 23u) & 0xffu);
    var eb = i32((ub >> 23u) & 0xffu);
    var ma = ua & 0x7fffffu;
    var mb = ub & 0x7fffffu;
    if (ea == 255 || eb == 255 || (ea == 0 && ma == 0u) || (eb == 0 && mb == 0u)) { return a / b; }
    if (ea == 0) { let s = countLeadingZeros(ma) - 8u; ma = ma << s; ea = 1 - i32(s); } else { ma = ma | 0x800000u; }
    if (eb == 0) { let s = countLeadingZeros(mb) - 8u; mb = mb << s; eb = 1 - i32(s); } else { mb = mb | 0x800000u; }
    let sign = (ua ^ ub) & 0x80000000u;
    var e = ea - eb + 127;
    if (ma < mb) { ma = ma << 1u; e = e - 1; }
    var rem = ma;
    var q = 0u;
    for (var i = 0u; i < 26u; i = i + 1u) {
        q = q << 1u;
        if (rem >= mb) { rem = rem - mb; q = q | 1u; }
        rem = rem << 1u;
    }
    var r = 2u;
    if (e < 1) { r = u32(3 - e); }
    var m = bround_q(q, rem != 0u, r);
    if (e >= 1) {
        if (m == 0x1000000u) { m = 0x800000u; e = e + 1; }
        if (e >= 255) { return bitcast<f32>(sign | 0x7f800000u); }
        return bitcast<f32>(sign | (u32(e) << 23u) | (m & 0x7fffffu));
    }
    return bitcast<f32>(sign | m);
}
fn bsqrt(x: f32) -> f32 {
    let ux = bitcast<u32>(x);
    var e = i32((ux >> 23u) & 0xffu);
    var m = ux & 0x7fffffu;
    if (e == 255 || (ux >> 31u) == 1u || (e == 0 && m == 0u)) { return sqrt(x); }
    if (e == 0) { let s = countLeadingZeros(m) - 8u; m = m << s; e = 1 - i32(s); } else { m = m | 0x800000u; }
    var ue = e - 127;
    if ((ue & 1) != 0) { m = m << 1u; ue = ue - 1; }
    let hi = m >> 5u;
    let lo = m << 27u;
    var res = 0u;
    var rem = 0u;
    for (var i = 0u; i < 26u; i = i + 1u) {
        let sh = 50u - 2u * i;
        var pair = (lo >> (sh & 31u)) & 3u;
        if (sh >= 32u) { pair = (hi >> (sh - 32u)) & 3u; }
        rem = (rem << 2u) | pair;
        let trial = (res << 2u) | 1u;
        if (rem >= trial) { rem = rem - trial; res = (res << 1u) | 1u; } else { res = res << 1u; }
    }
    var mm = bround_q(res, rem != 0u, 2u);
    var be = ue / 2 + 127;
    if (mm == 0x1000000u) { mm = 0x800000u; be = be + 1; }
    return bitcast<f32>((u32(be) << 23u) | (mm & 0x7fffffu));
}
