//// kernel
// recurrent: fused recurrent linear attention, one dispatch for all T steps.
//   context[b,h,t,e] = sum_l rho[b,h,l,e] * query[b,h,t,l]      (state before the update)
//   rho[b,h,l,e]     = (rho[b,h,l,e] + query[b,h,t,l] * value[b,vh,t,e]) * decay[h]
// A workgroup owns one (b, h) and a block of COLS column vectors; each column's state
// (L rows) lives in registers, split over TPC threads ("threads per column") that own
// rows lane, lane + TPC, ... and reduce their partial context via {{REDUCE_NAME}}.
// Knobs: WG threads, TPC threads per column, VW columns per vector (f32/vec2/vec4),
// IPI column vectors per thread, CT steps per chunk. ROWS = ceil(L / TPC) and LQ = L are
// rendered from the problem. Unchunked, the steps read q and v from storage; chunked
// (CT > 0 in the schedule), the query rows and this workgroup's value columns of CT
// steps are first staged in workgroup memory by all threads (two barriers per chunk),
// so the step loop reads no global memory: a thread's only chain is its state update.
// With the deferred reduction (reduce=2, chunked only) the TPC partial sums of every
// step go to workgroup memory and are summed once per chunk (one barrier per chunk),
// the chunk's context rows written coalesced.
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

    var cols: array<u32, IPI>;
    var live: array<bool, IPI>;
    for (var i = 0u; i < IPI; i++) {
        cols[i] = (blk * IPI + i) * SLOTS + slot;
        live[i] = cols[i] < p.ev;
    }
    var r: array<{{VEC}}, ROWS * IPI>;
    for (var k = 0u; k < ROWS; k++) {
        let l = k * TPC + lane;
        for (var i = 0u; i < IPI; i++) {
            var s = {{VEC}}(0.0);
            if (l < LQ && live[i]) {
                s = rho_in[(bh * LQ + l) * p.ev + cols[i]];
            }
            r[k * IPI + i] = s;
        }
    }
    let d = decay[h];
    let col0 = blk * COLS;

    for (var t0 = 0u; t0 < p.t; ) {
        let n = min(CT, p.t - t0);
{{STAGE}}
        for (var s = 0u; s < n; s++) {
            let t = t0 + s;
            var v: array<{{VEC}}, IPI>;
            var acc: array<{{VEC}}, IPI>;
            for (var i = 0u; i < IPI; i++) {
                v[i] = {{V_AT}};
                acc[i] = {{VEC}}(0.0);
            }
            for (var k = 0u; k < ROWS; k++) {
                let l = k * TPC + lane;
                let in_l = l < LQ;  // rows l >= L pad the lanes' share when TPC doesn't divide L
                let q = select(0.0, {{Q_AT}}, in_l);
                for (var i = 0u; i < IPI; i++) {
                    let old = r[k * IPI + i];
                    acc[i] += old * q;
                    // A padded row keeps its zero state: (0 + 0 * v) * d would turn an Inf in
                    // v or d into NaN, and that NaN into the column's context (NaN * 0),
                    // where numpy has no such row.
                    r[k * IPI + i] = select(old, (old + q * v[i]) * d, in_l);
                }
            }
{{REDUCE}}
{{STEP_WRITE}}
        }
{{CHUNK_END}}
        t0 += n;
    }

    for (var k = 0u; k < ROWS; k++) {
        let l = k * TPC + lane;
        for (var i = 0u; i < IPI; i++) {
            if (l < LQ && live[i]) {
                rho_out[(bh * LQ + l) * p.ev + cols[i]] = r[k * IPI + i];
            }
        }
    }
}

//// chunk_decl
var<workgroup> qs: array<f32, CT * LQ>;
var<workgroup> vs: array<{{VEC}}, CT * COLS>;

//// stage
        workgroupBarrier();  // the last chunk's readers are done with qs / vs
        let qbase = (bh * p.t + t0) * LQ;
        for (var j = lid; j < n * LQ; j += WG) {
            qs[j] = query[qbase + j];
        }
        for (var j = lid; j < n * COLS; j += WG) {
            vs[j] = value[(vbh * p.t + t0 + j / COLS) * p.ev + min(col0 + j % COLS, p.ev - 1u)];
        }
        workgroupBarrier();

//// none_decl
//// none
        // TPC == 1: each thread holds a whole column, nothing to reduce.

//// subgroup_decl
//// subgroup
        // The TPC lanes of a column are adjacent in one subgroup (TPC <= the adapter's
        // smallest subgroup, checked by the schedule): butterfly them, no barrier.
        for (var s = TPC / 2u; s > 0u; s >>= 1u) {
            for (var i = 0u; i < IPI; i++) {
                acc[i] += subgroupShuffleXor(acc[i], s);
            }
        }

//// workgroup_decl
// Double-buffered by step parity, so one barrier per step suffices: a thread can only
// overwrite this step's half after the next step's barrier, which lane 0 reaches
// after it has read it.
var<workgroup> partial: array<{{VEC}}, 2u * WG * IPI>;
//// workgroup
        let half = (t & 1u) * WG * IPI;
        for (var i = 0u; i < IPI; i++) {
            partial[half + lid * IPI + i] = acc[i];
        }
        workgroupBarrier();
        if (lane == 0u) {
            for (var i = 0u; i < IPI; i++) {
                var s = {{VEC}}(0.0);
                for (var j = 0u; j < TPC; j++) {
                    s += partial[half + (lid + j) * IPI + i];
                }
                acc[i] = s;
            }
        }

//// step_write
            if (lane == 0u) {
                for (var i = 0u; i < IPI; i++) {
                    if (live[i]) {
                        context[(bh * p.t + t) * p.ev + cols[i]] = acc[i];
                    }
                }
            }

//// deferred_decl
// Partial sums of one chunk: row (step s, lane) holds the COLS columns of the workgroup,
// rows padded by one vector so a column's TPC lanes fall on different banks.
const PCOLS: u32 = COLS + 1u;
var<workgroup> partial: array<{{VEC}}, CT * TPC * PCOLS>;

//// deferred
            // deferred: no reduction here; the partial sums wait for the chunk's end.

//// deferred_write
            for (var i = 0u; i < IPI; i++) {
                partial[(s * TPC + lane) * PCOLS + i * SLOTS + slot] = acc[i];
            }

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
