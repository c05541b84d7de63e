//// bitonic
// topk (per-block): for each BLOCK-element block of x, the k largest values in
// descending order, written to out[block * k .. block * k + k]. Elements past n pad
// the tail block with -FLT_MAX (knob pad=1: with -Inf, for the global top-k's stages).
//
// Ordering (deterministic, shared with the numpy reference): values are compared as
// u32 keys in IEEE-754 total order after every NaN is replaced by the canonical
// quiet NaN 0x7fc00000, so NaN sorts above +Inf (and is written back as 0x7fc00000) and
// -0.0 sorts just below +0.0. Working on bit patterns keeps the result exact.
//
// Schedule knobs (template): BLOCK = workgroup_size threads (a power of two), IPI
// blocks per workgroup (each thread loads IPI elements and does IPI/2 compare-
// exchanges per stage), VW = 1 or 4 (vec4<u32> loads; needs n % 4 == 0). The
// workgroup loads its IPI blocks into workgroup memory and bitonic-sorts each block
// descending. Workgroups beyond `groups` (from folding into 2-D) exit at once.
const BLOCK: u32 = {{WG}}u;
const IPI: u32 = {{IPI}}u;
const VW: u32 = {{VW}}u;
const SPAN: u32 = BLOCK * IPI;
const PAD_KEY: u32 = {{PAD_KEY}}u; // key of -FLT_MAX (pad 0) or of -Inf (pad 1)

struct Params { n: u32, k: u32, groups: u32, blocks: u32 }

@group(0) @binding(0) var<storage, read> x: array<{{VEC}}>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

var<workgroup> keys: array<u32, SPAN>;

fn to_key(raw: u32) -> u32 {
    var bits = raw;
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        bits = 0x7fc00000u;
    }
    if ((bits & 0x80000000u) != 0u) {
        return ~bits;
    }
    return bits | 0x80000000u;
}

fn from_key(key: u32) -> u32 {
    if ((key & 0x80000000u) != 0u) {
        return key & 0x7fffffffu;
    }
    return ~key;
}

fn load(base: u32, lid: u32) {
    let first = base / VW;
    for (var v = lid; v < SPAN / VW; v += BLOCK) {
        let e = base + v * VW;
        {{LOAD}}
    }
}

fn bitonic_sort_descending(lid: u32) {
    for (var size = 2u; size <= BLOCK; size <<= 1u) {
        for (var stride = size >> 1u; stride > 0u; stride >>= 1u) {
            for (var q = lid; q < SPAN / 2u; q += BLOCK) {
                let i = 2u * q - (q & (stride - 1u));
                let j = i + stride;
                let descending = ((i & (BLOCK - 1u)) & size) == 0u;
                let a = keys[i];
                let b = keys[j];
                if ((a < b) == descending && a != b) {
                    keys[i] = b;
                    keys[j] = a;
                }
            }
            workgroupBarrier();
        }
    }
}

@compute @workgroup_size(BLOCK)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * nwg.x;
    if (group >= p.groups) {
        return;
    }
    load(group * SPAN, lid);
    workgroupBarrier();
    bitonic_sort_descending(lid);
    for (var s = 0u; s < IPI; s++) {
        let block = group * IPI + s;
        if (block < p.blocks) {
            for (var r = lid; r < p.k; r += BLOCK) {
                out[block * p.k + r] = from_key(keys[s * BLOCK + r]);
            }
        }
    }
}

//// select
// topk (per-block), selection variant (schedule knob algorithm=1): the same output as
// the bitonic kernel (same blocks of BLOCK elements, same u32 keys in IEEE-754 total
// order with NaN canonicalized, k largest descending, tail padded with -FLT_MAX), but
// no workgroup memory and no barriers: one block is read by T adjacent threads, each
// streaming contiguous chunks of C elements (C * 4 bytes per thread per iteration) and
// keeping a running top-K (K = next power of two >= k, K <= 32) in registers:
//   per group of S = min(K, C) elements: bitonic-sort the group (unrolled, in registers),
//   then merge it into the list: l[i] = max(l[i], g[K-1-i]) (a bitonic sequence holding
//   the top K of both) followed by a bitonic clean.
// The T lists of a block are merged the same way through subgroupShuffleXor (T <= 4,
// the smallest subgroup size WebGPU allows, so a block's lanes share a subgroup); lane 0
// writes the k keys back as floats. Workgroups beyond `groups` exit at once.
const BLOCK: u32 = {{WG}}u;
const T: u32 = {{TPB}}u;
const SLOTS: u32 = BLOCK / T;
const IPI: u32 = {{IPI}}u;
const C: u32 = {{C}}u;
const CHUNKS: u32 = BLOCK / (T * C);
const KOUT: u32 = {{KOUT}}u;
const PAD_KEY: u32 = {{PAD_KEY}}u; // key of -FLT_MAX (pad 0) or of -Inf (pad 1)

struct Params { n: u32, k: u32, groups: u32, blocks: u32 }

@group(0) @binding(0) var<storage, read> x: array<{{VEC}}>;
@group(0) @binding(1) var<storage, read_write> out: array<{{OUT}}>;
@group(0) @binding(2) var<uniform> p: Params;

// Same key as the bitonic kernel's to_key, branch-free.
fn to_key(raw: u32) -> u32 {
    let bits = select(raw, 0x7fc00000u, (raw & 0x7fffffffu) > 0x7f800000u);
    return bits ^ (u32(i32(bits) >> 31u) | 0x80000000u);
}

fn from_key(key: u32) -> u32 {
    return key ^ select(0xffffffffu, 0x80000000u, key >= 0x80000000u);
}

// Keys of elements e..e+VW-1 (padding past n); e is a multiple of VW and n % VW == 0.
fn keys_at(e: u32) -> {{VEC}} {
    if (e < p.n) {
        return {{KEYS_OF}}(x[e / {{VW}}u]);
    }
    return {{VEC}}(PAD_KEY);
}

fn keys4(q: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(to_key(q.x), to_key(q.y), to_key(q.z), to_key(q.w));
}

@compute @workgroup_size(BLOCK)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * nwg.x;
    if (group >= p.groups) {
        return;
    }
    let lane = lid % T;
    let slot = lid / T;
    for (var i = 0u; i < IPI; i++) {
        let block = (group * IPI + i) * SLOTS + slot;
{{LIST}}
        for (var ch = 0u; ch < CHUNKS; ch++) {
            let start = block * BLOCK + (ch * T + lane) * C;
{{CHUNK}}
        }
{{LANES}}
        if (lane == 0u && block < p.blocks) {
{{STORE}}
        }
    }
}
