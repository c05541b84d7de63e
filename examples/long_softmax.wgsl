// Softmax over long rows in two passes: each of `splits` workgroups of a row reduces its
// slice to (max, sum of exp(x - max)) in stats (slice_stats); then each combines its row's
// stats and writes its slice of y (scale_slices).
const WG: u32 = {{workgroup_size}}u;
const SPLITS: u32 = {{splits}}u;

struct Params { rows: u32, cols: u32 }

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> stats: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

var<workgroup> lanes: array<f32, WG>;

fn reduce(lid: u32, value: f32, take_max: bool) -> f32 {
    lanes[lid] = value;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            let other = lanes[lid + stride];
            lanes[lid] = select(lanes[lid] + other, max(lanes[lid], other), take_max);
        }
        workgroupBarrier();
    }
    let result = lanes[0];
    workgroupBarrier();
    return result;
}

@compute @workgroup_size({{workgroup_size}})
fn slice_stats(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slice = (params.cols + SPLITS - 1u) / SPLITS;
    let start = wid.x * slice;
    let end = min(params.cols, start + slice);
    let base = wid.y * params.cols;
    var m = -3.402823e38;
    for (var c = start + lid; c < end; c += WG) {
        m = max(m, x[base + c]);
    }
    m = reduce(lid, m, true);
    var s = 0.0;
    for (var c = start + lid; c < end; c += WG) {
        s += exp(x[base + c] - m);
    }
    s = reduce(lid, s, false);
    if (lid == 0u) {
        let at = 2u * (wid.y * SPLITS + wid.x);
        stats[at] = m;
        stats[at + 1u] = s;
    }
}

@compute @workgroup_size({{workgroup_size}})
fn scale_slices(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let first = 2u * wid.y * SPLITS;
    var m = -3.402823e38;
    for (var i = 0u; i < SPLITS; i++) {
        m = max(m, stats[first + 2u * i]);
    }
    var s = 0.0;
    for (var i = 0u; i < SPLITS; i++) {
        s += stats[first + 2u * i + 1u] * exp(stats[first + 2u * i] - m);
    }
    let inv = 1.0 / s;
    let slice = (params.cols + SPLITS - 1u) / SPLITS;
    let start = wid.x * slice;
    let end = min(params.cols, start + slice);
    let base = wid.y * params.cols;
    for (var c = start + lid; c < end; c += WG) {
        y[base + c] = exp(x[base + c] - m) * inv;
    }
}
