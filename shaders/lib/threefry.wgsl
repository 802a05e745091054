fn brotl(x: u32, r: u32) -> u32 { return (x << r) | (x >> (32u - r)); }
fn bmix4(v: vec2<u32>, r0: u32, r1: u32, r2: u32, r3: u32) -> vec2<u32> {
    var a = v.x + v.y; var b = brotl(v.y, r0) ^ a;
    a = a + b; b = brotl(b, r1) ^ a;
    a = a + b; b = brotl(b, r2) ^ a;
    a = a + b; b = brotl(b, r3) ^ a;
    return vec2<u32>(a, b);
}
fn bthreefry(k0: u32, k1: u32, hi: u32, lo: u32) -> vec2<u32> {
    let k2 = k0 ^ k1 ^ 0x1BD11BDAu;
    var v = vec2<u32>(hi + k0, lo + k1);
    v = bmix4(v, 13u, 15u, 26u, 6u) + vec2<u32>(k1, k2 + 1u);
    v = bmix4(v, 17u, 29u, 16u, 24u) + vec2<u32>(k2, k0 + 2u);
    v = bmix4(v, 13u, 15u, 26u, 6u) + vec2<u32>(k0, k1 + 3u);
    v = bmix4(v, 17u, 29u, 16u, 24u) + vec2<u32>(k1, k2 + 4u);
    v = bmix4(v, 13u, 15u, 26u, 6u) + vec2<u32>(k2, k0 + 5u);
    return v;
}
