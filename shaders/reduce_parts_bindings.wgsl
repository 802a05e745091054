@group(0) @binding(0) var<storage, read> in0: array<{{T}}>;
@group(0) @binding(1) var<storage, read_write> out0: array<{{T}}>;
