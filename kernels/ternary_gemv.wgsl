// ternary_gemv: out[o] = scale[o] * sum_{i<k} t(w[o][i]) * x[i], where w holds 2-bit
// codes packed 16 per u32, low bits first, in rows of kw = ceil(k/16) words.
// t(0) = 0, t(1) = +1, t(2) = -1, and the unused code 3 decodes to 0
// (t(c) = (c & 1) - (c >> 1)). Codes at positions >= k are ignored.
// Schedule knobs (template): WG threads per workgroup, TPR threads cooperating on one
// row (partial sums reduced in workgroup memory), IPI rows per thread group, VW = 1
// or 4 (vec4<u32> weight loads, 64 codes each; requires kw % 4 == 0). Workgroups
// beyond `groups` (from folding a large linear count into 2-D) exit at once.
const WG: u32 = {{WG}}u;
const TPR: u32 = {{TPR}}u;
const IPI: u32 = {{IPI}}u;
const VW: u32 = {{VW}}u;
const SLOTS: u32 = WG / TPR;

struct Params { m: u32, k: u32, kw: u32, groups: u32 }

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<{{VEC}}>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

var<workgroup> partial: array<f32, WG>;

fn ternary(word: u32, j: u32) -> f32 {
    let code = (word >> (2u * j)) & 3u;
    return f32(code & 1u) - f32(code >> 1u);
}

// Sum of t(code_j) * x[first + j] over the 16 codes of `word`, skipping positions >= k.
// Full words are unrolled (also keeps loop trip counts low: lavapipe caps a loop at
// 65535 iterations); only a row's last, partial word loops.
fn word_dot(word: u32, first: u32) -> f32 {
    if (first + 16u <= p.k) {
        return {{UNROLLED}};
    }
    var acc = 0.0;
    for (var j = 0u; j < p.k - first; j++) {
        acc += ternary(word, j) * x[first + j];
    }
    return acc;
}

fn row_partial(row: u32, lane: u32) -> f32 {
    var acc = 0.0;
    let nv = p.kw / VW;
    let base = row * nv;
    for (var c = lane; c < nv; c += TPR) {
        let v = w[base + c];
        {{ACCUMULATE}}
    }
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
    let lane = lid % TPR;
    let slot = lid / TPR;
    for (var i = 0u; i < IPI; i++) {
        let row = (group * IPI + i) * SLOTS + slot;
        var acc = 0.0;
        if (row < p.m) {
            acc = row_partial(row, lane);
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
            out[row] = scale[row] * partial[lid];
        }
        workgroupBarrier();
    }
}
