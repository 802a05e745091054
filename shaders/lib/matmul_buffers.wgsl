@group(0) @binding(0) var<storage, read> A: array<{{T}}>;
@group(0) @binding(1) var<storage, read> B: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> C: array<{{T}}>;
