// gemv: y = A·x with A row-major m×n f32.
// Schedule knobs (template): WG threads per workgroup, TPR threads cooperating on one
// row (their partial sums reduced in workgroup memory), IPI rows per thread group,
// VW = 1 or 4 (vec4 loads; requires n % 4 == 0). Workgroups beyond `groups` (from
// folding a large linear count into 2-D) exit at once.
const WG: u32 = {{WG}}u;
const TPR: u32 = {{TPR}}u;
const IPI: u32 = {{IPI}}u;
const VW: u32 = {{VW}}u;
const SLOTS: u32 = WG / TPR;

struct Params { m: u32, n: u32, groups: u32, pad: u32 }

@group(0) @binding(0) var<storage, read> a: array<{{VEC}}>;
@group(0) @binding(1) var<storage, read> x: array<{{VEC}}>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

var<workgroup> partial: array<f32, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * nwg.x;
    if (group >= p.groups) {
        return;
    }
    let lane = lid % TPR;
    let slot = lid / TPR;
    let nv = p.n / VW;
    for (var i = 0u; i < IPI; i++) {
        let row = (group * IPI + i) * SLOTS + slot;
        var acc = 0.0;
        if (row < p.m) {
            let base = row * nv;
            for (var c = lane; c < nv; c += TPR) {
                acc += {{MULADD}};
            }
        }
        partial[lid] = acc;
        workgroupBarrier();
        for (var s = TPR / 2u; s > 0u; s >>= 1u) {
            if (lane < s) {
                partial[lid] += partial[lid + s];
            }
            workgroupBarrier();
        }
        if (lane == 0u && row < p.m) {
            y[row] = partial[lid];
        }
        workgroupBarrier();
    }
}
