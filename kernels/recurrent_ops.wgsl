//// strided_copy
// Elementary op (baseline): out[out_off + sum_d i_d * os_d] = a[a_off + sum_d i_d * as_d]
// over a 4-D index space `shape`. Slicing, broadcasting (stride 0) and writing a slice
// of a concatenation are all this one op with different strides, as in a framework.
struct Params {
    shape: vec4<u32>, a_strides: vec4<u32>, out_strides: vec4<u32>,
    a_off: u32, out_off: u32, count: u32, pad: u32,
}
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= p.count) {
        return;
    }
    let idx = vec4<u32>(i / (p.shape.y * p.shape.z * p.shape.w), (i / (p.shape.z * p.shape.w)) % p.shape.y,
                        (i / p.shape.w) % p.shape.z, i % p.shape.w);
    out[p.out_off + dot(idx, p.out_strides)] = a[p.a_off + dot(idx, p.a_strides)];
}

//// binary
// Elementary op (baseline): out[i] = a[ia] {{OP}} b[ib], a and b broadcast to the
// contiguous 4-D output `shape` through their strides (0 on broadcast axes).
struct Params { shape: vec4<u32>, a_strides: vec4<u32>, b_strides: vec4<u32>, count: u32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= p.count) {
        return;
    }
    let idx = vec4<u32>(i / (p.shape.y * p.shape.z * p.shape.w), (i / (p.shape.z * p.shape.w)) % p.shape.y,
                        (i / p.shape.w) % p.shape.z, i % p.shape.w);
    out[i] = a[dot(idx, p.a_strides)] {{OP}} b[dot(idx, p.b_strides)];
}

//// sum_axis
// Elementary op (baseline): out[o, j] = sum_r a[o, r, j] over a contiguous [outer, reduce, inner].
struct Params { outer: u32, reduce: u32, inner: u32, count: u32 }
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    if (i >= p.count) {
        return;
    }
    let o = i / p.inner;
    let j = i % p.inner;
    var s = 0.0;
    for (var r = 0u; r < p.reduce; r++) {
        s += a[(o * p.reduce + r) * p.inner + j];
    }
    out[i] = s;
}
