fn bdiv_i32(a: i32, b: i32) -> i32 { if (b == 0i) { return -1i; } if (a == i32(-2147483647 - 1) && b == -1i) { return a; } return a / b; }
fn brem_i32(a: i32, b: i32) -> i32 { if (b == 0i) { return a; } if (a == i32(-2147483647 - 1) && b == -1i) { return 0i; } return a - b * (a / b); }
