// Row-wise softmax: one workgroup per row, each invocation striding over the columns.
// Knobs (placeholders): workgroup_size; store_exp keeps exp(x - max) in y between the
// sum and the scaling instead of computing it twice.
const WG: u32 = {{workgroup_size}}u;
const STORE_EXP: bool = {{store_exp}};

struct Params { rows: u32, cols: u32 }

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> params: Params;

var<workgroup> partial: array<f32, WG>;

fn reduce(lid: u32, value: f32, take_max: bool) -> f32 {
    partial[lid] = value;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            let other = partial[lid + stride];
            partial[lid] = select(partial[lid] + other, max(partial[lid], other), take_max);
        }
        workgroupBarrier();
    }
    let result = partial[0];
    workgroupBarrier();
    return result;
}

@compute @workgroup_size({{workgroup_size}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let base = wid.x * params.cols;
    var m = -3.402823e38;
    for (var c = lid; c < params.cols; c += WG) {
        m = max(m, x[base + c]);
    }
    m = reduce(lid, m, true);
    var s = 0.0;
    for (var c = lid; c < params.cols; c += WG) {
        let e = exp(x[base + c] - m);
        if (STORE_EXP) {
            y[base + c] = e;
        }
        s += e;
    }
    let inv = 1.0 / reduce(lid, s, false);
    for (var c = lid; c < params.cols; c += WG) {
        if (STORE_EXP) {
            y[base + c] = y[base + c] * inv;
        } else {
            y[base + c] = exp(x[base + c] - m) * inv;
        }
    }
}
