//// kernel
// recurrent: fused recurrent linear attention, one dispatch for all T steps.
//   context[b,h,t,e] = sum_l rho[b,h,l,e] * query[b,h,t,l]      (state before the update)
//   rho[b,h,l,e]     = (rho[b,h,l,e] + query[b,h,t,l] * value[b,vh,t,e]) * decay[h]
// A workgroup owns one (b, h) and a block of COLS column vectors; each column's state
// (L rows) lives in registers, split over TPC threads ("threads per column") that own
// rows lane, lane + TPC, ... and reduce their partial context via {{REDUCE_NAME}}.
// Knobs: WG threads, TPC threads per column, VW columns per vector (f32/vec2/vec4),
// IPI column vectors per thread, CT steps per chunk, prefetch (the next chunk's loads in
// registers while this chunk's steps run). ROWS = ceil(L / TPC) and LQ = L are
// rendered from the problem. Unchunked, the steps read q and v from storage; chunked
// (CT > 0 in the schedule), the query rows and this workgroup's value columns of CT
// steps are first staged in workgroup memory by all threads (two barriers per chunk),
// so the step loop reads no global memory: a thread's only chain is its state update.
// With the deferred reduction (reduce=2, chunked only) the TPC partial sums of every
// step go to workgroup memory and are summed once per chunk (one barrier per chunk),
// the chunk's context rows written coalesced.
// The host unrolls everything a thread owns into named scalars: its columns col_<i> (live_<i>
// while inside E), state r<k>_<i> (row l<k> = k * TPC + lane of column vector i), step
// values v<i> and partial contexts acc<i>, and the chunk's staged loads (every load a
// thread makes for a chunk is issued before its first store to workgroup memory, so their
// latencies overlap). Private arrays indexed in loops ended up in slow local memory on the
// NVIDIA Vulkan driver (kernels/gemm.wgsl). Lines of the reduce and write sections below
// holding `$i` are repeated for each i < IPI with `$i` replaced by i. Only the last row can pad
// (l >= L, when TPC doesn't divide L): the host guards that row alone.
// Absent rho/decay are passed as zeros/ones by the launcher (both exact).
const WG: u32 = {{WG}}u;
const TPC: u32 = {{TPC}}u;
const IPI: u32 = {{IPI}}u;
const ROWS: u32 = {{ROWS}}u;
const SLOTS: u32 = WG / TPC;
const CT: u32 = {{CT}}u;  // steps per chunk; unchunked, all of them
const LQ: u32 = {{L}}u;
const COLS: u32 = SLOTS * IPI;

struct Params { b: u32, h: u32, vh: u32, t: u32, l: u32, ev: u32, col_blocks: u32, groups: u32 }

@group(0) @binding(0) var<storage, read> query: array<f32>;
@group(0) @binding(1) var<storage, read> value: array<{{VEC}}>;
@group(0) @binding(2) var<storage, read> rho_in: array<{{VEC}}>;
@group(0) @binding(3) var<storage, read> decay: array<f32>;
@group(0) @binding(4) var<storage, read_write> context: array<{{VEC}}>;
@group(0) @binding(5) var<storage, read_write> rho_out: array<{{VEC}}>;
@group(0) @binding(6) var<uniform> p: Params;

{{CHUNK_DECL}}
{{REDUCE_DECL}}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * nwg.x;
    if (group >= p.groups) {
        return;  // the whole workgroup: barriers below stay uniform
    }
    let bh = group / p.col_blocks;
    let blk = group % p.col_blocks;
    let h = bh % p.h;
    let vbh = (bh / p.h) * p.vh + h % p.vh;
    let lane = lid % TPC;
    let slot = lid / TPC;
{{COLUMNS}}
{{LOAD_STATE}}
    let d = decay[h];
    let col0 = blk * COLS;
{{PREFETCH}}
    for (var t0 = 0u; t0 < p.t; ) {
        let n = min(CT, p.t - t0);
{{STAGE}}
        for (var s = 0u; s < n; s++) {
            let t = t0 + s;
{{STEP}}
{{REDUCE}}
{{STEP_WRITE}}
        }
{{CHUNK_END}}
        t0 += n;
    }
{{STORE_STATE}}
}

//// chunk_decl
var<workgroup> qs: array<f32, CT * LQ>;
var<workgroup> vs: array<{{VEC}}, CT * COLS>;

//// stage
        workgroupBarrier();  // the last chunk's readers are done with qs / vs
        let qbase = (bh * p.t + t0) * LQ;
{{FETCH}}
        workgroupBarrier();

//// prefetch_first
    // prefetch=1: the chunk's loads go to registers one chunk ahead (issued before the
    // previous chunk's steps, stored after them), so a chunk's steps hide the next one's
    // memory latency instead of waiting it out at the chunk's start.
{{DECL}}
    {
        let tn = 0u;
        let nn = min(CT, p.t);
{{LOAD}}
    }

//// stage_prefetch
        workgroupBarrier();  // the last chunk's readers are done with qs / vs
{{STORE}}
        workgroupBarrier();
        let tn = t0 + n;  // the next chunk's loads, in flight while this chunk's steps run
        if (tn < p.t) {
            let nn = min(CT, p.t - tn);
{{LOAD}}
        }

//// none_decl
//// none
        // TPC == 1: each thread holds a whole column, nothing to reduce.

//// subgroup_decl
//// subgroup
        // The TPC lanes of a column are adjacent in one subgroup (TPC <= the adapter's
        // smallest subgroup, checked by the schedule): butterfly them, no barrier.
        for (var s = TPC / 2u; s > 0u; s >>= 1u) {
            acc$i += subgroupShuffleXor(acc$i, s);
        }

//// workgroup_decl
// Double-buffered by step parity, so one barrier per step suffices: a thread can only
// overwrite this step's half after the next step's barrier, which lane 0 reaches
// after it has read it.
var<workgroup> partial: array<{{VEC}}, 2u * WG * IPI>;
//// workgroup
        let half = (t & 1u) * WG * IPI;
        partial[half + lid * IPI + $iu] = acc$i;
        workgroupBarrier();
        if (lane == 0u) {
            var sum$i = {{VEC}}(0.0);
            for (var j = 0u; j < TPC; j++) {
                sum$i += partial[half + (lid + j) * IPI + $iu];
            }
            acc$i = sum$i;
        }

//// step_write
            if (lane == 0u) {
                if (live_$i) { context[(bh * p.t + t) * p.ev + col_$i] = acc$i; }
            }

//// deferred_decl
// Partial sums of one chunk: row (step s, lane) holds the COLS columns of the workgroup,
// rows padded by one vector so a column's TPC lanes fall on different banks.
const PCOLS: u32 = COLS + 1u;
var<workgroup> partial: array<{{VEC}}, CT * TPC * PCOLS>;

//// deferred
            // deferred: no reduction here; the partial sums wait for the chunk's end.

//// deferred_write
            partial[(s * TPC + lane) * PCOLS + $iu * SLOTS + slot] = acc$i;

//// deferred_end
        workgroupBarrier();  // every step's partial sums of this chunk are in
        for (var j = lid; j < n * COLS; j += WG) {
            let s = j / COLS;
            let c = j % COLS;
            var sum = {{VEC}}(0.0);
            for (var l = 0u; l < TPC; l++) {
                sum += partial[(s * TPC + l) * PCOLS + c];
            }
            let col = (blk * IPI + c / SLOTS) * SLOTS + c % SLOTS;
            if (col < p.ev) {
                context[(bh * p.t + t0 + s) * p.ev + col] = sum;
            }
        }

//// chunked_common
// recurrent, chunked form (schedule knob form=1): the same math, three passes.
// Within a chunk of C steps starting at t0 (n = min(C, T - t0) real steps), with
// S the state before the chunk and d^k the head's decay to the k-th power:
//   context[t0+s] = d^s (q_s . S) + sum_{j<s} (q_s . q_j) d^(s-j) v_j
//   S'            = d^n S + sum_{j<n} q_j (x) d^(n-j) v_j
// Pass 1 (chunk_state) computes each chunk's own contribution dS_c = sum_j q_j (x) d^(n-j) v_j,
// every chunk in parallel; pass 2 (chunk_scan) carries the state across the chunks, one
// thread per state entry (S_c -> states[c], then S_{c+1} = d^n S_c + dS_c), and writes rho;
// pass 3 (chunk_output) computes every chunk's contexts in parallel from S_c.
// Passes 1 and 3 are small matrix products tiled in registers: a thread owns 4 x 4
// blocks (4 rows, 4 columns in a vec4), so each pair of vec4 reads of workgroup memory
// feeds 16 multiply-adds. The host renders the per-thread blocks unrolled.
// The powers d^k come from repeated multiplication (a table per workgroup), never from a
// division by a cumulative product, so no decay can overflow a quotient; masked terms
// (j >= s, steps past T) are selected away, never multiplied by zero.
const WG: u32 = {{WG}}u;
const C: u32 = {{C}}u;        // steps per chunk (a multiple of 4)
const C4: u32 = C / 4u;
const EB: u32 = {{EB}}u;      // state columns per workgroup (passes 1 and 3)
const TCOL: u32 = EB / 4u;    // threads across a workgroup's columns, 4 columns each
const TROW: u32 = WG / TCOL;  // threads down its rows
const LQ: u32 = {{L}}u;
const L4: u32 = (LQ + 3u) / 4u;

struct Params { b: u32, h: u32, vh: u32, t: u32, l: u32, e: u32, nc: u32, eblocks: u32,
                groups: u32, total: u32, agroups: u32, pad1: u32 }  // agroups: the attention pass's B·H·NC

//// chunk_tile_decl
var<workgroup> vs: array<vec4<f32>, C * TCOL>;  // the tile's value rows v_j, 4 columns a vector
var<workgroup> pw: array<f32, C + 1u>;          // the head's decay powers d^0 .. d^C

//// chunk_tile
    let blk = group % p.eblocks;
    let c = (group / p.eblocks) % p.nc;
    let bh = group / (p.eblocks * p.nc);
    let h = bh % p.h;
    let vbh = (bh / p.h) * p.vh + h % p.vh;
    let t0 = c * C;
    let n = min(C, p.t - t0);
    let d = decay[h];
{{POWERS}}
{{LOAD_V}}
    let tc = lid % TCOL;
    let tr = lid / TCOL;
    let e0 = blk * EB + tc * 4u;

//// chunk_put
fn put(row: u32, e0: u32, x: vec4<f32>) {  // 4 columns from e0 of a row of {{OUT}}, those inside E
    if (e0 < p.e) { {{OUT}}[row + e0] = x.x; }
    if (e0 + 1u < p.e) { {{OUT}}[row + e0 + 1u] = x.y; }
    if (e0 + 2u < p.e) { {{OUT}}[row + e0 + 2u] = x.z; }
    if (e0 + 3u < p.e) { {{OUT}}[row + e0 + 3u] = x.w; }
}

//// chunk_state
{{COMMON}}
@group(0) @binding(0) var<storage, read> query: array<f32>;
@group(0) @binding(1) var<storage, read> value: array<f32>;
@group(0) @binding(3) var<storage, read> decay: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<storage, read_write> states: array<f32>;

const MQ: u32 = {{MQ}}u;  // latent-row quads per thread
var<workgroup> qs: array<vec4<f32>, C * L4>;   // q_j scaled by d^(n-j), 4 latent rows a vector
{{TILE_DECL}}

{{PUT}}

{{ENTRY}}
{{TILE}}
    workgroupBarrier();  // pw is in
{{LOAD_QS}}
    workgroupBarrier();
{{DECL}}
    for (var j = 0u; j < n; j++) {
        let v = vs[j * TCOL + tc];
{{FMA}}
    }
    let base = (bh * p.nc + c) * LQ;
{{STORE}}
}

//// chunk_scan
{{COMMON}}
@group(0) @binding(2) var<storage, read> rho_in: array<f32>;
@group(0) @binding(3) var<storage, read> decay: array<f32>;
@group(0) @binding(5) var<storage, read_write> rho_out: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<storage, read_write> states: array<f32>;

const SCAN_WG: u32 = 256u;
const AHEAD: u32 = {{AHEAD}}u;  // chunk contributions loaded at once, so their latencies overlap

@compute @workgroup_size(SCAN_WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * SCAN_WG + lid;
    if (i >= p.total) {
        return;
    }
    let per_bh = LQ * p.e;
    let bh = i / per_bh;
    let within = i % per_bh;  // l * E + e
    let d = decay[bh % p.h];
    var d_full = 1.0;
    for (var k = 0u; k < C; k++) {
        d_full *= d;
    }
    let last = p.t - (p.nc - 1u) * C;
    var d_last = 1.0;
    for (var k = 0u; k < last; k++) {
        d_last *= d;
    }
    var s = rho_in[i];
    let base = bh * p.nc * per_bh + within;
    // The host repeats each line holding the token dollar-a once for each a < AHEAD.
    for (var c0 = 0u; c0 < p.nc; c0 += AHEAD) {
        let delta$a = states[base + min(c0 + $au, p.nc - 1u) * per_bh];
        let chunk$a = c0 + $au;
        if (chunk$a < p.nc) { states[base + chunk$a * per_bh] = s; s = select(d_full, d_last, chunk$a + 1u == p.nc) * s + delta$a; }
    }
    rho_out[i] = s;
}

//// chunk_output
{{COMMON}}
@group(0) @binding(0) var<storage, read> query: array<f32>;
@group(0) @binding(1) var<storage, read> value: array<f32>;
@group(0) @binding(3) var<storage, read> decay: array<f32>;
@group(0) @binding(4) var<storage, read_write> context: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<storage, read_write> states: array<f32>;
{{ATT_DECL}}

const MS: u32 = {{MS}}u;  // step quads per thread
var<workgroup> qt: array<vec4<f32>, LQ * C4>;   // q transposed: latent row l, 4 steps a vector
var<workgroup> ss: array<vec4<f32>, LQ * TCOL>; // the state carried into the chunk, 4 columns a vector
var<workgroup> at: array<vec4<f32>, C * C4>;    // at[j * C4 + s / 4][s % 4] = (q_s . q_j) d^(s-j), j < s
{{TILE_DECL}}

{{PUT}}

{{ENTRY}}
{{TILE}}
{{LOAD_Q}}
    let sbase = (bh * p.nc + c) * LQ * p.e;
{{LOAD_S}}
    workgroupBarrier();
{{ATTENTION}}
    workgroupBarrier();
{{DECL}}
    for (var l = 0u; l < LQ; l++) {
        let sv = ss[l * TCOL + tc];
{{STATE_FMA}}
    }
{{SCALE}}
    for (var j = 0u; j < n; j++) {
        let v = vs[j * TCOL + tc];
{{ATT_FMA}}
    }
{{STORE}}
}

//// chunk_walk
// recurrent, chunked form walked by one workgroup (schedule knob form=2): one dispatch, a
// workgroup per (b, h, block of EB state columns) that carries its state S (L x EB) in
// workgroup memory from chunk to chunk; per chunk of C steps (n real ones), with the math
// of `chunked_common`:
//   load q (transposed) and v                  -> barrier
//   attention at = (q_s . q_j) d^(s-j), j < s  -> barrier
//   context rows: d^s (q_s . S) + at . v       -> barrier
//   S = d^n S + sum_j q_j (x) d^(n-j) v_j      -> barrier
// and S is written to rho at the end: no chunk-states scratch, no scan, no second pass.
// Units of work are spread over all threads (a context row's 4 columns, a state entry's
// 4 columns, a 4 x 4 attention block), so every thread works at every C.
{{COMMON}}
@group(0) @binding(0) var<storage, read> query: array<f32>;
@group(0) @binding(1) var<storage, read> value: array<f32>;
@group(0) @binding(2) var<storage, read> rho_in: array<f32>;
@group(0) @binding(3) var<storage, read> decay: array<f32>;
@group(0) @binding(4) var<storage, read_write> context: array<f32>;
@group(0) @binding(5) var<storage, read_write> rho_out: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
{{ATT_DECL}}

var<workgroup> qt: array<vec4<f32>, LQ * C4>;   // q transposed: latent row l, 4 steps a vector
var<workgroup> ss: array<vec4<f32>, LQ * TCOL>; // the carried state, 4 columns a vector
var<workgroup> at: array<vec4<f32>, C * C4>;    // at[j * C4 + s / 4][s % 4], j < s
var<workgroup> vs: array<vec4<f32>, C * TCOL>;  // the chunk's value rows, 4 columns a vector
var<workgroup> pw: array<f32, C + 1u>;          // d^0 .. d^C

{{ENTRY}}
    let blk = group % p.eblocks;
    let bh = group / p.eblocks;
    let h = bh % p.h;
    let vbh = (bh / p.h) * p.vh + h % p.vh;
    let d = decay[h];
{{POWERS}}
{{LOAD_RHO}}
    for (var c = 0u; c < p.nc; c++) {
        let t0 = c * C;
        let n = min(C, p.t - t0);
{{LOAD_Q}}
{{LOAD_V}}
        workgroupBarrier();
{{ATTENTION}}
        workgroupBarrier();
        for (var u = lid; u < C * TCOL; u += WG) {  // context row s, columns 4 tc .. 4 tc + 3
            let s = u / TCOL;
            let tc = u % TCOL;
            var o = vec4<f32>(0.0);
            for (var l = 0u; l < LQ; l++) {
                o += qt[l * C4 + s / 4u][s % 4u] * ss[l * TCOL + tc];
            }
            o *= pw[s];
            for (var j = 0u; j < s; j++) {
                o += at[j * C4 + s / 4u][s % 4u] * vs[j * TCOL + tc];
            }
            let e0 = blk * EB + tc * 4u;
            if (s < n) {
                let row = (bh * p.t + t0 + s) * p.e + e0;
                if (e0 < p.e) { context[row] = o.x; }
                if (e0 + 1u < p.e) { context[row + 1u] = o.y; }
                if (e0 + 2u < p.e) { context[row + 2u] = o.z; }
                if (e0 + 3u < p.e) { context[row + 3u] = o.w; }
            }
        }
        workgroupBarrier();
        for (var u = lid; u < LQ * TCOL; u += WG) {  // state row l, columns 4 tc .. 4 tc + 3
            let l = u / TCOL;
            let tc = u % TCOL;
            var x = pw[n] * ss[u];
            for (var j = 0u; j < n; j++) {
                x += (qt[l * C4 + j / 4u][j % 4u] * pw[n - j]) * vs[j * TCOL + tc];
            }
            ss[u] = x;
        }
        workgroupBarrier();
    }
    for (var i = lid; i < LQ * EB; i += WG) {
        let e = blk * EB + i % EB;
        if (e < p.e) {
            rho_out[(bh * LQ + i / EB) * p.e + e] = ss[(i / EB) * TCOL + (i % EB) / 4u][i % 4u];
        }
    }
}

//// chunk_attention_pass
// Schedule knob attention_pass=1 (either chunked form): every chunk's attention matrix at
// (the `chunk_attention` snippet) computed once, by a workgroup per (b, h, chunk), into a
// scratch of B·H·NC·C·C floats that pass 3 or the walk reads, instead of each of a chunk's
// ceil(E / block_e) column blocks computing its own (C·C·L multiply-adds each: at E=768,
// block_e=16 and C=64, 48 copies and most of the walk's arithmetic).
{{COMMON}}
@group(0) @binding(0) var<storage, read> query: array<f32>;
@group(0) @binding(3) var<storage, read> decay: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding({{ATT_BINDING}}) var<storage, read_write> attention: array<vec4<f32>>;

var<workgroup> qt: array<vec4<f32>, LQ * C4>;   // q transposed: latent row l, 4 steps a vector
var<workgroup> at: array<vec4<f32>, C * C4>;    // at[j * C4 + s / 4][s % 4], j < s
var<workgroup> pw: array<f32, C + 1u>;          // d^0 .. d^C

{{ENTRY}}
    let c = group % p.nc;
    let bh = group / p.nc;
    let t0 = c * C;
    let n = min(C, p.t - t0);
    let d = decay[bh % p.h];
{{POWERS}}
{{LOAD_Q}}
    workgroupBarrier();
{{ATTENTION}}
    workgroupBarrier();
    for (var i = lid; i < C * C4; i += WG) {
        attention[group * C * C4 + i] = at[i];
    }
}

//// chunk_entry
// Every chunked pass but the scan: WG threads a workgroup over a folded 2-D grid, the
// workgroups past p.{{GROUPS}} leaving whole (barriers after this stay uniform).
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * nwg.x;
    if (group >= p.{{GROUPS}}) {
        return;  // the whole workgroup: barriers below stay uniform
    }

//// chunk_powers
// pw[k] = d^k for k = 0..C, each by k products, in the stepwise chain's order.
    for (var k = lid; k <= C; k += WG) {
        var x = 1.0;
        for (var m = 0u; m < k; m++) {
            x *= d;
        }
        pw[k] = x;
    }

//// chunk_attention
// The attention matrix at[j * C4 + s / 4][s % 4] = (q_s . q_j) d^(s-j) for j < s (else 0),
// in 4 x 4 blocks of (s, j); blocks above the diagonal hold only j > s.
    for (var b = lid; b < C4 * C4; b += WG) {
        let sb = b / C4;
        let jb = b % C4;
        var x0 = vec4<f32>(0.0);
        var x1 = vec4<f32>(0.0);
        var x2 = vec4<f32>(0.0);
        var x3 = vec4<f32>(0.0);
        if (jb <= sb) {
            for (var l = 0u; l < LQ; l++) {
                let qa = qt[l * C4 + sb];
                let qb = qt[l * C4 + jb];
                x0 += qa.x * qb;
                x1 += qa.y * qb;
                x2 += qa.z * qb;
                x3 += qa.w * qb;
            }
        }
{{ATT_COLUMNS}}
    }
