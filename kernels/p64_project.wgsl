// p64_project: out[r] = sum_{w<16} weights[w] * f32(word[r][w]) over n records of
// 16 u32 words (64 bytes) each. Terms are added in word order w = 0..15 (unrolled).
// Schedule knobs (template): WG threads per workgroup, IPI records per thread (strided
// by WG so neighbouring threads read neighbouring records), VW = 1 or 4 (vec4<u32>
// record loads: 4 per record instead of 16). Workgroups beyond `groups` (from folding
// a large linear count into 2-D) exit at once.
const WG: u32 = {{WG}}u;
const IPI: u32 = {{IPI}}u;
const VW: u32 = {{VW}}u;

struct Params { n: u32, groups: u32, pad0: u32, pad1: u32 }

@group(0) @binding(0) var<storage, read> records: array<{{VEC}}>;
@group(0) @binding(1) var<storage, read> weights: array<f32, 16>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn project(r: u32) -> f32 {
    let base = r * (16u / VW);
    var acc = 0.0;
    {{PROJECT}}
    return acc;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * nwg.x;
    if (group >= p.groups) {
        return;
    }
    for (var i = 0u; i < IPI; i++) {
        let r = (group * IPI + i) * WG + lid;
        if (r < p.n) {
            out[r] = project(r);
        }
    }
}
