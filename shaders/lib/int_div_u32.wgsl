fn bdiv_u32(a: u32, b: u32) -> u32 { if (b == 0u) { return 4294967295u; } return a / b; }
fn brem_u32(a: u32, b: u32) -> u32 { if (b == 0u) { return a; } return a % b; }
