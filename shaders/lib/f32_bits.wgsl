fn bf32_bits(b: u32) -> f32 { return bitcast<f32>(b); }
