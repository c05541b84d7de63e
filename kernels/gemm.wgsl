//// kernel
// gemm: C = A·B, row-major f32, A m×k, B k×n, C m×n.
// Schedule knobs (template): a BM×BN tile of C per workgroup, computed by THM×THN
// threads (WG = THM*THN), each owning a TM×TN register tile at rows ty + i*THM and
// columns tx + j*THN (strided, so neighbouring threads touch neighbouring words:
// coalesced C writes and conflict-free workgroup reads). BK-deep slices of A (stored
// transposed) and B are staged in workgroup memory in NBUF buffers: with NBUF = 2 the
// next slice is fetched into registers while the current one is multiplied, with one
// barrier per slice; STEP = 2 (double_buffer 2) unrolls that loop by two slices, so each
// half reads and writes a buffer known when the kernel is compiled. VW = 1 or 4: A and B are bound as arrays of VEC (f32 or vec4<f32>);
// the host pads k and n to multiples of VW (zeros) so vec4 rows stay aligned. Every
// load and store tests the bounds this problem's shape can cross (A_INSIDE, B_INSIDE,
// PUT_A_INSIDE, PUT_B_INSIDE, C_INSIDE: farm.catalog.gemm_tiling.guards; `true` where the
// tiles divide the shape). Workgroups beyond `groups` (a folded 2-D grid) exit.
// With split_k (RANGE, C_BINDING, C_BASE) a workgroup computes its tile over one range
// s0..s1 of k's slices into a partial tile of the scratch at binding 4; `split_sum` adds
// the ranges' partials, in range order, into C.
// The register tile, the staged loads and the C stores are unrolled by the host into
// the placeholder blocks below (named scalars acc_i_j, a_next_i, b_next_i): private arrays
// indexed in loops ended up in slow local memory on the NVIDIA Vulkan driver. The host
// also emits the thread layout (tx, ty: row-major, or warp tiles), the tile declarations
// (f32, or vec4<f32> for vec4 reads from workgroup memory, where each thread owns groups
// of 4 contiguous rows and columns) and the stores into them. A's k-rows in workgroup
// memory are AS = BM + PAD floats apart (PAD > 0 spreads the transposing stores over banks).
const WG: u32 = {{WG}}u;
const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const BK: u32 = {{BK}}u;
const TM: u32 = {{TM}}u;
const TN: u32 = {{TN}}u;
const VW: u32 = {{VW}}u;
const NBUF: u32 = {{NBUF}}u;
const STEP: u32 = {{STEP}}u;
const PAD: u32 = {{PAD}}u;
const AS: u32 = BM + PAD;
const THM: u32 = BM / TM;
const THN: u32 = BN / TN;
const A_ROW_VECS: u32 = BK / VW;
const B_ROW_VECS: u32 = BN / VW;
const A_VECS: u32 = BM * A_ROW_VECS;
const B_VECS: u32 = BK * B_ROW_VECS;

// m, n: C's shape; kp, np: the (padded) k and n of the bound A and B; groups_n: tiles
// along n; groups: tiles in all.
struct Params { m: u32, n: u32, kp: u32, np: u32, groups_n: u32, groups: u32, pad0: u32, pad1: u32 }

@group(0) @binding(0) var<storage, read> a: array<{{VEC}}>;
@group(0) @binding(1) var<storage, read> b: array<{{VEC}}>;
@group(0) @binding({{C_BINDING}}) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
{{C_BASE_DECL}}

{{TILES}}

// Global -> value: vector `idx` of slice `slice` of A (rows row0.., k slice*BK..), zero outside.
fn load_a(slice: u32, row0: u32, idx: u32) -> {{VEC}} {
    let kv = p.kp / VW;
    let row = row0 + idx / A_ROW_VECS;
    let kvi = slice * A_ROW_VECS + idx % A_ROW_VECS;
    if ({{A_INSIDE}}) {
        return a[row * kv + kvi];
    }
    return {{VEC}}();
}

// Global -> value: vector `idx` of slice `slice` of B (k slice*BK.., columns col0..), zero outside.
fn load_b(slice: u32, col0: u32, idx: u32) -> {{VEC}} {
    let nv = p.np / VW;
    let krow = slice * BK + idx / B_ROW_VECS;
    let nvi = col0 / VW + idx % B_ROW_VECS;
    if ({{B_INSIDE}}) {
        return b[krow * nv + nvi];
    }
    return {{VEC}}();
}

// Value -> workgroup buffer `buf`: A transposed (k-major), B as is.
fn put_a(buf: u32, idx: u32, v: {{VEC}}) {
    if ({{PUT_A_INSIDE}}) {
        let at = (buf * BK + (idx % A_ROW_VECS) * VW) * AS + idx / A_ROW_VECS;
        {{PUT_A}}
    }
}

fn put_b(buf: u32, idx: u32, v: {{VEC}}) {
    if ({{PUT_B_INSIDE}}) {
        let at = (buf * BK + idx / B_ROW_VECS) * BN + (idx % B_ROW_VECS) * VW;
        {{PUT_B}}
    }
}

fn store_c(row: u32, col: u32, value: f32) {
    if ({{C_INSIDE}}) {
        c[{{C_BASE}}row * p.n + col] = value;
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
    {{RANGE}}
    let row0 = (tile / p.groups_n) * BM;
    let col0 = (tile % p.groups_n) * BN;
    {{LAYOUT}}
    {{DECLARE}}

    {
        let slice = s0;
        {{FETCH}}
        let buf = 0u;
        {{STASH}}
    }
    workgroupBarrier();
    for (var t = s0; t < s1; t += STEP) {
        let more = t + 1u < s1;
        let slice = t + 1u;
        if (STEP == 2u) {
            // slice t is in buffer 0 (t - s0 is even), slice t + 1 goes to buffer 1
            if (more) {
                {{FETCH}}
            }
            {
                let buf = 0u;
                {{MULTIPLY}}
            }
            if (more) {
                let buf = 1u;
                {{STASH}}
            }
            workgroupBarrier();
            if (more) {
                let more = t + 2u < s1;
                let slice = t + 2u;
                if (more) {
                    {{FETCH}}
                }
                {
                    let buf = 1u;
                    {{MULTIPLY}}
                }
                if (more) {
                    let buf = 0u;
                    {{STASH}}
                }
                workgroupBarrier();
            }
        } else if (NBUF == 2u) {
            if (more) {
                {{FETCH}}
            }
            {
                let buf = (t - s0) % 2u;
                {{MULTIPLY}}
            }
            if (more) {
                let buf = (slice - s0) % 2u;
                {{STASH}}
            }
            workgroupBarrier();
        } else {
            {
                let buf = 0u;
                {{MULTIPLY}}
            }
            workgroupBarrier();
            if (more) {
                {{FETCH}}
                let buf = 0u;
                {{STASH}}
            }
            workgroupBarrier();
        }
    }
    {{WRITE}}
}

//// split_sum
// gemm split_k: C[i] = the sum over ranges z = 0, 1, ... of partial z's element i.
struct Params { m: u32, n: u32, kp: u32, np: u32, groups_n: u32, groups: u32, pad0: u32, pad1: u32 }
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;
@group(0) @binding(4) var<storage, read> partials: array<f32>;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * {{WG}}u + lid;
    let count = p.m * p.n;
    if (i >= count) {
        return;
    }
    var sum = partials[i];
    for (var z = 1u; z < {{SPLITS}}u; z++) {
        sum += partials[z * count + i];
    }
    c[i] = sum;
}
