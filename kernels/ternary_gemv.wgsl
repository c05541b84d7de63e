//// direct
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

//// staged
// ternary_gemv, staged variant (schedule knob stage_x=1): the same sums, computed with
// the x vector staged in workgroup memory one tile (TILE_WORDS packed words = 16x as
// many x values, zero past k) at a time, shared by every row of the workgroup, and R
// rows per thread accumulated together so each x value read from workgroup memory
// serves R rows. TPR threads cooperate on a row (interleaved weight vectors, partial
// sums reduced in workgroup memory at the end), VW = 1 or 4 (vec4<u32> weight loads,
// 64 codes each). Decoding needs no int->float conversion: bit 0 of a code adds x to
// `pos`, bit 1 adds x to `neg`, and the row's sum is pos - neg (code 3 adds to both and
// cancels; zero-filled x past k makes codes past k add zeros). x vec4 v lives at
// swz(v), an XOR swizzle that keeps the TPR lanes of a row on distinct banks.
const WG: u32 = {{WG}}u;
const TPR: u32 = {{TPR}}u;
const R: u32 = {{R}}u;
const VW: u32 = {{VW}}u;
const SLOTS: u32 = WG / TPR;
const TILE_WORDS: u32 = {{TILE_WORDS}}u;
const TILE_V4: u32 = TILE_WORDS * 4u;

struct Params { m: u32, k: u32, kw: u32, groups: u32 }

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<{{VEC}}>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

var<workgroup> xs: array<vec4<f32>, TILE_V4>;
var<workgroup> partial: array<f32, WG>;

fn swz(v: u32) -> u32 {
    return v ^ ((v >> {{SWIZZLE_SHIFT}}u) & 7u);
}

fn x_at(e: u32) -> f32 {
    if (e < p.k) {
        return x[e];
    }
    return 0.0;
}

fn stage(first_word: u32, lid: u32) {
    for (var v = lid; v < TILE_V4; v += WG) {
        let e = first_word * 16u + 4u * v;
        xs[swz(v)] = vec4<f32>(x_at(e), x_at(e + 1u), x_at(e + 2u), x_at(e + 3u));
    }
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
    let nv = p.kw / VW;
{{ROWS}}
    for (var t0 = 0u; t0 < p.kw; t0 += TILE_WORDS) {
        workgroupBarrier();
        stage(t0, lid);
        workgroupBarrier();
        let words = min(TILE_WORDS, p.kw - t0);
        for (var c = lane; c < words / VW; c += TPR) {
{{BODY}}
        }
    }
{{REDUCE}}
}

// Sum the TPR lanes' partial sums of one row and write scale * sum from lane 0.
fn finish(row: u32, acc: f32, lid: u32, lane: u32) {
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
