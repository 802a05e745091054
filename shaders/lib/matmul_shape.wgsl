const BATCH: u32 = {{BATCH}}u;
const M: u32 = {{M}}u;
const K: u32 = {{K}}u;
const N: u32 = {{N}}u;
const GRID_X: u32 = {{GRID_X}}u;
const GRID_Y: u32 = {{GRID_Y}}u;
