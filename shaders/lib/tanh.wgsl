// tanh with one exp (WGSL's tanh costs two on Mesa, plus the clamp it needs): an odd polynomial
// below |x| = 0.625 (0.9 ULP; no cancellation near zero), 1 - 2 / (exp(2|x|) + 1)
// above (1.4 ULP with an exact exp; exp overflowing to inf gives exactly 1, so no clamp), the sign
// taken from x. A NaN fails both comparisons and goes through the arithmetic: NaN out. The
// polynomial's coefficients are fitted by scripts/tanh_poly.py.
fn btanh(x: f32) -> f32 {
    let a = abs(x);
    let t = a * a;
    // Where t is 0 (x = ±0, or |x| < 2^-75) x is tanh(x) rounded; the sum would turn -0.0 into
    // +0.0 (x·t·P is +0.0, P being negative).
    let p = select(x + x * t * (-0.33333287 + t * (0.13331513 + t * (-0.05374464 + t * (0.020653063 + t * -0.0057188915)))), x, t == 0.0);
    let e = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
    return select(select(e, -e, x < 0.0), p, a < 0.625);
}
