// A full-array sum in two passes: `splits` workgroups each sum a slice of x into
// partials[split] (slice_sums), then one workgroup sums the partials into y[0] (sum_partials).
const WG: u32 = {{workgroup_size}}u;
const SPLITS: u32 = {{splits}}u;

struct Params { n: u32 }

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> partials: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

var<workgroup> lanes: array<f32, WG>;

fn workgroup_sum(lid: u32, value: f32) -> f32 {
    lanes[lid] = value;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            lanes[lid] += lanes[lid + stride];
        }
        workgroupBarrier();
    }
    return lanes[0];
}

@compute @workgroup_size({{workgroup_size}})
fn slice_sums(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let slice = (params.n + SPLITS - 1u) / SPLITS;
    let end = min(params.n, (wid.x + 1u) * slice);
    var s = 0.0;
    for (var i = wid.x * slice + lid; i < end; i += WG) {
        s += x[i];
    }
    let sum = workgroup_sum(lid, s);
    if (lid == 0u) {
        partials[wid.x] = sum;
    }
}

@compute @workgroup_size({{workgroup_size}})
fn sum_partials(@builtin(local_invocation_index) lid: u32) {
    var s = 0.0;
    for (var i = lid; i < SPLITS; i += WG) {
        s += partials[i];
    }
    let sum = workgroup_sum(lid, s);
    if (lid == 0u) {
        y[0] = sum;
    }
}
