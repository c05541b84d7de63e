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

{{COMMON}}

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
        finish(row, acc, lid, lane);
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

{{COMMON}}
var<workgroup> xs: array<vec4<f32>, TILE_V4>;

fn swz(v: u32) -> u32 {
    return v ^ ((v >> {{SWIZZLE_SHIFT}}u) & 7u);
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

//// lut
// ternary_gemv, pair-lookup-table variant (schedule knob stage_x=2): the same sums with
// one table read per code pair. k is processed in tiles of TILE_WORDS packed words
// (8 * TILE_WORDS code pairs). Per tile the workgroup first builds, for every pair p of
// the tile and every 4-bit nibble n = c0 | (c1 << 2) of two codes,
// tbl[p][n] = t(c0) * x[2p] + t(c1) * x[2p + 1] in workgroup memory (x past k reads 0,
// so pairs past k hold zeros; code 3 has t = 0 like everywhere), one entry per thread per
// step with the nibble fixed per thread (WG % 16 == 0). Each thread then adds, per packed
// word, the 8 entries its nibbles (word >> 4j) & 15 select: ~3 ops per 2 codes instead of
// ~6 per code. R rows per thread, TPR threads per row (interleaved weight vectors,
// partial sums reduced in workgroup memory at the end), VW = 1 or 4 (vec4<u32> weight
// loads). A thread's weight vectors of a tile are loaded before the build so the loads
// overlap it; vector indices past a row's end clamp to its last vector, whose lookups then
// read the zero entries of pairs past k (so every tile runs the full unrolled body).
// Layout: tbl[g] holds the 8 * VW pairs of the tile's weight vector g, word q's pair j
// at q * 128 + j * 16, in GROUP = 128 * VW (+ 16 when TPR > 1) floats. Banks: with
// TPR = 1 the lanes of a subgroup are rows reading one 16-entry block (16 consecutive
// banks: conflict-free); with TPR > 1 neighbouring lanes read neighbouring vectors, and
// the 16 floats of padding put those in opposite bank halves: TPR = 2 conflict-free,
// TPR = 4 or 8 at most TPR/2-way (TPR blocks of 16 entries on 32 banks can do no better;
// a stride of 17 per pair would overlap TPR = 2's two blocks on 8 banks).
const WG: u32 = {{WG}}u;
const TPR: u32 = {{TPR}}u;
const R: u32 = {{R}}u;
const VW: u32 = {{VW}}u;
const SLOTS: u32 = WG / TPR;
const TILE_WORDS: u32 = {{TILE_WORDS}}u;
const ENTRIES: u32 = TILE_WORDS * 128u;
const GROUPS: u32 = TILE_WORDS / VW;
const GROUP: u32 = {{GROUP}}u;

{{COMMON}}
var<workgroup> tbl: array<array<f32, GROUP>, GROUPS>;

// The table of the tile starting at packed word t0: entry e is nibble e & 15 of the
// tile's pair e >> 4; this thread's nibble weighs x[2p] by ta and x[2p + 1] by tb.
fn build(t0: u32, lid: u32, ta: f32, tb: f32) {
    for (var e = lid; e < ENTRIES; e += WG) {
        let i = t0 * 16u + 2u * (e >> 4u);
        tbl[e / (128u * VW)][e % (128u * VW)] = ta * x_at(i) + tb * x_at(i + 1u);
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
    let n = lid & 15u;
    let ta = f32(n & 1u) - f32((n >> 1u) & 1u);
    let tb = f32((n >> 2u) & 1u) - f32(n >> 3u);
{{ROWS}}
    for (var t0 = 0u; t0 < p.kw; t0 += TILE_WORDS) {
        let c = t0 / VW + lane;
{{LOADS}}
        workgroupBarrier();
        build(t0, lid, ta, tb);
        workgroupBarrier();
{{LOOKUPS}}
    }
{{REDUCE}}
}

//// dp4a
// ternary_gemv, integer dot-product variant (schedule knob stage_x=3): the same sums with
// one 4-lane integer dot product (dot4U8Packed / dot4I8Packed) per 4 codes and x digit plane.
// Per tile of TILE packed words (16 * TILE x values, zero past k) the workgroup writes x in
// block floating point (see word_digits): one exponent per tile, each x a 24-bit integer in
// three base-256 digit planes, plane p of word q one vec4<u32> whose u32 j packs the digits
// of x at positions 16q + j + 4b for b = 0..3 (byte b): the lanes that the mask
// 0x03030303 << 2j selects from a word of 2-bit fields. A weight word becomes
// U = w + 0x55555555 - (((w >> 1) & 0x55555555) | (w & 0xaaaaaaaa)): every 2-bit field holds
// t + 1 in 0..2 (code 3: 1, t = 0; the carries and borrows between fields cancel, see
// farm/catalog/ternary_variants.py's _dp4a_body). Fields j = 0 and 2 are masked in place
// (U & 0x03030303, (U >> 4) & 0x03030303); j = 1 and 3 stay shifted by 2 bits (x4) and go
// to their own accumulators, divided by 4 exactly at the tile's end. The offset (t + 1
// instead of t) is removed exactly in integers: the thread subtracts the digit sums of the
// words it read (msum). Per tile and row the three integer sums are converted once:
// sum += 2^(e - 22) * (D0 + 256 D1 + 65536 D2). Sums are exact integers within a tile; the
// only rounding is the quantization of x to 23 bits below its tile's largest |x| and the
// f32 adds across tiles (x that are small integers, as in the exact test data, are not
// rounded at all). A non-finite x makes every row of its workgroup NaN; a tile whose |x|
// are all below 2^-104 counts as zero.
// R rows per thread, TPR threads per row (interleaved weight vectors, partial sums reduced
// in workgroup memory), VW = 1 or 4 (vec4<u32> weight loads; vectors past a row's end
// clamp to its last vector and meet zero x planes). One thread writes a word's three plane
// vectors and digit sums, and each is read with one 16-byte load (four u32 loads per plane
// vector would cost about a quarter of the loop). Slots are swizzled (q + q / 8): the 8 lanes of
// a 16-byte load phase, reading words 4 apart (vec4 weights), hit distinct bank groups.
const WG: u32 = {{WG}}u;
const TPR: u32 = {{TPR}}u;
const R: u32 = {{R}}u;
const VW: u32 = {{VW}}u;
const SLOTS: u32 = WG / TPR;
const TILE: u32 = {{TILE_WORDS}}u;
const PAD: u32 = TILE + TILE / 8u;

{{COMMON}}
{{DIGITS}}
var<workgroup> xp: array<vec4<u32>, 3u * PAD>;
var<workgroup> msum: array<vec4<i32>, PAD>;
var<workgroup> tmax: array<atomic<u32>, 2>;

fn slot_of(q: u32) -> u32 {
    return q + (q >> 3u);
}


// The digit planes and digit sums of the tile whose largest |x| is in tmax[parity], one
// word per thread at a time; returns 2^(e - 22) (NaN when an x is not finite). Clears the
// other parity's maximum for the next tile.
fn tile_planes(t0: u32, lid: u32, parity: u32) -> f32 {
    let bits = atomicLoad(&tmax[parity]);
    if (lid == 0u) {
        atomicStore(&tmax[1u - parity], 0u);
    }
    for (var q = lid; q < TILE; q += WG) {
        let d = word_digits((t0 + q) * 16u, bits);
        let s = slot_of(q);
        xp[s] = d.d0;
        xp[PAD + s] = d.d1;
        xp[2u * PAD + s] = d.d2;
        msum[s] = d.sums;
    }
    return tile_scale(bits);
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
    if (lid == 0u) {  // not left to workgroup zero-initialization (lavapipe: a stale maximum)
        atomicStore(&tmax[0], 0u);
        atomicStore(&tmax[1], 0u);
    }
    for (var t0 = 0u; t0 < p.kw; t0 += TILE) {
        let parity = (t0 / TILE) & 1u;
        workgroupBarrier();
        atomicMax(&tmax[parity], tile_abs_max(t0, lid));
        workgroupBarrier();
        let f = tile_planes(t0, lid, parity);
        workgroupBarrier();
        var m0 = 0;
        var m1 = 0;
        var m2 = 0;
{{SUMS}}
{{LOOP}}
{{BODY}}
        }
{{CONVERT}}
    }
{{REDUCE}}
}

//// digits
// Block floating point for the integer dot-product kernels (stage_x=3 and 4). `bits` is
// the tile's largest |x| as u32 bits, e its exponent: each x becomes the integer
// m = round(x * 2^(22 - e)) (|m| < 2^23), split into base-256 digits, planes 0 and 1
// unsigned bytes, plane 2 the signed top byte (m = d0 + 256 d1 + 65536 d2).
struct Digits { d0: vec4<u32>, d1: vec4<u32>, d2: vec4<u32>, sums: vec4<i32> }

// This thread's share of the largest |x| of the tile starting at packed word t0, as bits
// (positive floats order like u32); the caller combines the threads' with atomicMax.
fn tile_abs_max(t0: u32, lid: u32) -> u32 {
    var mx = 0u;
    for (var e = lid; e < TILE * 16u; e += WG) {
        mx = max(mx, bitcast<u32>(abs(x_at(t0 * 16u + e))));
    }
    return mx;
}

// The three plane vectors and digit sums (x, y, z) of the packed word whose first x is
// x[first].
fn word_digits(first: u32, bits: u32) -> Digits {
    let ebits = clamp(bits >> 23u, 23u, 254u);
    let qscale = bitcast<f32>((276u - ebits) << 23u);
    var out: Digits;
    var s0 = 0;
    var s1 = 0;
    var s2 = 0;
    for (var j = 0u; j < 4u; j++) {
        var d0 = 0u;
        var d1 = 0u;
        var d2 = 0u;
        for (var b = 0u; b < 4u; b++) {
            let m = clamp(i32(round(x_at(first + j + 4u * b) * qscale)), -8388608, 8388607);
            let u = bitcast<u32>(m);
            d0 |= (u & 255u) << (8u * b);
            d1 |= ((u >> 8u) & 255u) << (8u * b);
            d2 |= ((u >> 16u) & 255u) << (8u * b);
            s0 += i32(u & 255u);
            s1 += i32((u >> 8u) & 255u);
            s2 += m >> 16u;
        }
        out.d0[j] = d0;
        out.d1[j] = d1;
        out.d2[j] = d2;
    }
    out.sums = vec4<i32>(s0, s1, s2, 0);
    return out;
}

// 2^(e - 22): what a tile's integer sums are worth (NaN when its largest |x| is not finite).
fn tile_scale(bits: u32) -> f32 {
    if (bits >= 0x7f800000u) {
        return bitcast<f32>(0x7fc00000u);
    }
    return bitcast<f32>((clamp(bits >> 23u, 23u, 254u) - 22u) << 23u);
}

//// planes
// ternary_gemv stage_x=4, pass 1: x's digit planes once for every workgroup (the stage_x=3
// kernel builds them in each workgroup, behind two more barriers per tile). One workgroup
// per tile of TILE packed words (16 * TILE x values, zero past k), one word per thread at
// a time: planes[3q + p] = plane p of word q, tscale[tile] = 2^(e - 22) (see //// digits),
// and the digit sums (SUMS: clear_sums, add_sums, write_sums) per tile and lane of pass 2,
// tsum[tile * TPR + l] (//// lane_sums).
struct Params { m: u32, k: u32, kw: u32, groups: u32, splits: u32, span: u32, tiles: u32, blocks: u32 }

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<storage, read_write> planes: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read_write> tscale: array<f32>;

const WG: u32 = 128u;
const TILE: u32 = {{TILE_WORDS}}u;

var<workgroup> tmax: atomic<u32>;

fn x_at(e: u32) -> f32 {
    if (e < p.k) {
        return x[e];
    }
    return 0.0;
}

{{DIGITS}}
{{SUMS}}
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= p.tiles) {
        return;
    }
    let t0 = tile * TILE;
    if (lid == 0u) {  // explicit: lavapipe has shown stale workgroup memory
        atomicStore(&tmax, 0u);
    }
    clear_sums(lid);
    workgroupBarrier();
    atomicMax(&tmax, tile_abs_max(t0, lid));
    workgroupBarrier();
    let bits = atomicLoad(&tmax);
    for (var q = lid; q < TILE; q += WG) {
        let d = word_digits((t0 + q) * 16u, bits);
        let g = t0 + q;
        planes[3u * g] = d.d0;
        planes[3u * g + 1u] = d.d1;
        planes[3u * g + 2u] = d.d2;
        add_sums(g, q, d.sums);
    }
    write_sums(tile, lid);
    if (lid == 0u) {
        tscale[tile] = tile_scale(bits);
    }
}

//// lane_sums
// Pass 1's digit sums per tile and lane of pass 2: pass 2's lane l
// reads the weight vectors c = l, l + TPR, ... of VW words of every tile, that is the words
// q with (q / VW) % TPR == l (vectors past a row's end clamp to its last vector and meet
// the zero planes and zero digit sums of words past k: they add nothing). tsum[tile * TPR + l]
// (x, y, z: planes 0, 1, 2) is the sum of those words' digit sums: exactly the integers
// that lane would add up word by word, so its conversion, and the result, are bit for bit
// the same. (One sum a tile, taken off by lane 0 alone, keeps the row's integer sum but
// not the lanes': their f32 conversion rounds once past 2^24, so the bits differ.)
@group(0) @binding(9) var<storage, read_write> tsum: array<vec4<i32>>;

const TPR: u32 = {{TPR}}u;
const VW: u32 = {{VW}}u;

var<workgroup> lsum: array<atomic<i32>, 3u * TPR>;

fn clear_sums(lid: u32) {  // explicit, like tmax (before main's first barrier)
    for (var i = lid; i < 3u * TPR; i += WG) {
        atomicStore(&lsum[i], 0);
    }
}

fn add_sums(g: u32, q: u32, sums: vec4<i32>) {
    let l = 3u * ((q / VW) % TPR);
    atomicAdd(&lsum[l], sums.x);
    atomicAdd(&lsum[l + 1u], sums.y);
    atomicAdd(&lsum[l + 2u], sums.z);
}

// Every thread calls it (a barrier: every word's sums are in); thread l < TPR writes lane l's.
fn write_sums(tile: u32, lid: u32) {
    workgroupBarrier();
    if (lid < TPR) {
        let l = 3u * lid;
        let sums = vec4<i32>(atomicLoad(&lsum[l]), atomicLoad(&lsum[l + 1u]), atomicLoad(&lsum[l + 2u]), 0);
        tsum[tile * TPR + lid] = sums;
    }
}

//// split
// ternary_gemv stage_x=4, pass 2: the stage_x=3 loop (same layout in workgroup memory,
// same body) on the planes of pass 1, copied per tile from storage (16-byte loads, a few
// hundred KiB for all of x: cached) instead of computed: one barrier pair per tile.
// Workgroup g handles row block g % blocks and the tiles [s * span, (s + 1) * span) of
// split s = g / blocks: with SPLITS = 1 it writes out[row] = scale[row] * sum, otherwise
// its partial sum to part[s * m + row], which pass 3 adds in split order (deterministic).
// R rows per thread, TPR threads per row (interleaved weight vectors), VW = 1 or 4; weight
// vectors past a row's end clamp to its last vector and meet zero planes (words past k
// are zero in every plane and digit sum). Each lane reads its own digit sums per tile,
// tsum[tile * TPR + lane] (//// lane_sums), so none are staged. A thread stages the words
// q = lid, lid + WG, ... < TILE of a tile (none when lid >= TILE). FIRST_LOADS: each row's
// first weight vector, loaded before the loop (the body loads the next one an iteration ahead).
struct Params { m: u32, k: u32, kw: u32, groups: u32, splits: u32, span: u32, tiles: u32, blocks: u32 }

@group(0) @binding(1) var<storage, read> w: array<{{VEC}}>;
{{OUT_BINDINGS}}
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<storage, read> planes: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read> tscale: array<f32>;
@group(0) @binding(9) var<storage, read> tsum: array<vec4<i32>>;

const WG: u32 = {{WG}}u;
const TPR: u32 = {{TPR}}u;
const R: u32 = {{R}}u;
const VW: u32 = {{VW}}u;
const SLOTS: u32 = WG / TPR;
const TILE: u32 = {{TILE_WORDS}}u;
const PAD: u32 = TILE + TILE / 8u;

var<workgroup> xp: array<vec4<u32>, 3u * PAD>;

fn slot_of(q: u32) -> u32 {
    return q + (q >> 3u);
}

{{ROW_SUM}}
// Sum the TPR lanes' partial sums of one row; lane 0 stores it.
fn finish(row: u32, acc: f32, lid: u32, lane: u32, split: u32) {
    let sum = row_sum(acc, lid, lane);
    if (lane == 0u && row < p.m) {
        {{STORE}}
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) {
        return;
    }
    let group = g % p.blocks;
    let split = g / p.blocks;
    let lane = lid % TPR;
    let slot = lid / TPR;
    let nv = p.kw / VW;
{{ROWS}}
    let first = split * p.span;
    let last = min(first + p.span, p.tiles);
{{FIRST_LOADS}}
    for (var tile = first; tile < last; tile++) {
        let t0 = tile * TILE;
        workgroupBarrier();  // the previous tile's reads are done
        for (var q = lid; q < TILE; q += WG) {
            let s = slot_of(q);
            let at = t0 + q;
            xp[s] = planes[3u * at];
            xp[PAD + s] = planes[3u * at + 1u];
            xp[2u * PAD + s] = planes[3u * at + 2u];
        }
        workgroupBarrier();
        let f = tscale[tile];
        let ts = tsum[tile * TPR + lane];
        let m0 = ts.x;
        let m1 = ts.y;
        let m2 = ts.z;
{{SUMS}}
{{LOOP}}
{{BODY}}
        }
{{CONVERT}}
    }
{{REDUCE}}
}

//// split_sum
// ternary_gemv stage_x=4 with SPLITS > 1, pass 3: out[row] = scale[row] * the row's
// partial sums added in split order.
struct Params { m: u32, k: u32, kw: u32, groups: u32, splits: u32, span: u32, tiles: u32, blocks: u32 }

@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(8) var<storage, read> part: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = gid.x + gid.y * nwg.x * 256u;
    if (row >= p.m) {
        return;
    }
    var sum = 0.0;
    for (var s = 0u; s < p.splits; s++) {
        sum += part[s * p.m + row];
    }
    out[row] = scale[row] * sum;
}

//// row_sum
// The reduction of a row's TPR partial sums in workgroup memory (common and split).
var<workgroup> partial: array<f32, WG>;

// The sum of one row's TPR lanes' partial sums, valid in lane 0. Every thread of the
// workgroup calls it: it holds workgroup barriers.
fn row_sum(acc: f32, lid: u32, lane: u32) -> f32 {
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = TPR / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    let sum = partial[lid];
    workgroupBarrier();
    return sum;
}

//// common
// Shared by the four kernels: bindings, the x reader that zero-fills past k, and the
// reduction of a row's TPR partial sums in workgroup memory.
struct Params { m: u32, k: u32, kw: u32, groups: u32 }

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<{{VEC}}>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

fn x_at(e: u32) -> f32 {
    if (e < p.k) {
        return x[e];
    }
    return 0.0;
}

{{ROW_SUM}}
// Sum the TPR lanes' partial sums of one row and write scale * sum from lane 0.
fn finish(row: u32, acc: f32, lid: u32, lane: u32) {
    let sum = row_sum(acc, lid, lane);
    if (lane == 0u && row < p.m) {
        out[row] = scale[row] * sum;
    }
}
