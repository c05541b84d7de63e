// fft: batched forward radix-2 decimation-in-time DFT of interleaved complex f32,
// y[b][f] = Σ_t x[b][t] · exp(-2πi·f·t/N), N a power of two (2 ≤ N ≤ 1024).
// Schedule knobs (template): WG threads per workgroup; T transforms per workgroup (all
// T·N points live in workgroup memory, 8·T·N bytes); VW = 1 (x/y as array<f32>, two
// scalar loads per point) or 2 (array<vec2<f32>>, one load per point). Each stage's T·N/2
// butterflies are spread over the WG threads (threads beyond T·N/2 idle). Twiddles come
// from a host-computed table (exp(-2πi·t/N), t < N/2, computed in f64 and rounded once).
// Workgroups beyond `groups` (a folded 2-D grid) exit at once.
const WG: u32 = {{WG}}u;
const N: u32 = {{N}}u;
const LOGN: u32 = {{LOGN}}u;
const T: u32 = {{T}}u;
const HALF: u32 = N / 2u;

struct Params { batch: u32, groups: u32, pad0: u32, pad1: u32 }

@group(0) @binding(0) var<storage, read> x: array<{{ELEM}}>;
@group(0) @binding(1) var<storage, read> twiddle: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<{{ELEM}}>;
@group(0) @binding(3) var<uniform> p: Params;

var<workgroup> d: array<vec2<f32>, T * N>;

fn load(point: u32) -> vec2<f32> {
    {{LOAD}}
}

fn store(point: u32, v: vec2<f32>) {
    {{STORE}}
}

fn cmul(u: vec2<f32>, w: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(u.x * w.x - u.y * w.y, u.x * w.y + u.y * w.x);
}

// v · twiddle[t]. The twiddle of t = 0 is 1 (the table's (1, -0)) and is not multiplied:
// 1 · Inf is Inf, but the complex multiply would add -0 · Inf = NaN to the other part.
// It is the table's only entry with a zero part, so no twiddle multiply makes Inf · 0.
fn twiddled(v: vec2<f32>, t: u32) -> vec2<f32> {
    return select(cmul(v, twiddle[t]), v, t == 0u);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * nwg.x;
    if (group >= p.groups) {
        return;
    }
    let first = group * T;
    // Load in bit-reversed order so the butterflies can run in place.
    for (var idx = lid; idx < T * N; idx += WG) {
        let tr = idx / N;
        let i = idx % N;
        if (first + tr < p.batch) {
            d[tr * N + (reverseBits(i) >> (32u - LOGN))] = load((first + tr) * N + i);
        }
    }
    workgroupBarrier();
    for (var s = 0u; s < LOGN; s++) {
        let span = 1u << s;
        for (var bb = lid; bb < T * HALF; bb += WG) {
            let tr = bb / HALF;
            let b = bb % HALF;
            let j = b & (span - 1u);
            let i0 = tr * N + ((b >> s) << (s + 1u)) + j;
            let i1 = i0 + span;
            let u = d[i0];
            let v = twiddled(d[i1], j << (LOGN - 1u - s));
            d[i0] = u + v;
            d[i1] = u - v;
        }
        workgroupBarrier();
    }
    for (var idx = lid; idx < T * N; idx += WG) {
        let tr = idx / N;
        if (first + tr < p.batch) {
            store((first + tr) * N + idx % N, d[idx]);
        }
    }
}
// ==== stockham ====
// Stockham autosort variant (schedule knob `stockham` = 2, 4, 8, 16 or 32, entry point main_stockham):
// no bit reversal. Stage s has radix R (the knob's, and one smaller last stage for the
// rest of log2 N) and stride NS (the product of the earlier radices); each unit j < N/R reads
// its R points at j + q·N/R, twiddles them by exp(-2πi·(j mod NS)·q/(NS·R)), does a
// radix-R DFT in registers and writes its outputs at (j/NS)·NS·R + j mod NS + q·NS, which
// leaves the spectrum in natural order. The first stage reads global memory, the last
// writes it, and the stages between exchange through two workgroup buffers in turn (one
// barrier each; one buffer when two stages are the whole transform): log4 N - 1 exchanges for radix 4; with `single_buffer` through one buffer,
// every thread's points read into registers, a barrier, then written back (two barriers an
// exchange, half the workgroup memory). `slot` places point i of transform tr
// in a buffer; with `swizzle` 1-3 it XORs i's low 4 bits with a function of its high bits,
// with 4 it adds a pad slot per R points, so strided stores spread over the 32 banks (the
// host emits SLOT, and each stage reaches its points from one base slot: farm.catalog.fft_slots).
// The host unrolls the stages into STAGES and declares the buffers in BUFFERS.
{{BUFFERS}}

fn slot(tr: u32, i: u32) -> u32 {
    return {{SLOT}};
}

// exp(-2πi·t/N) for t < N from the half-period table: the second half is the first negated.
// Branch-free: the lanes of a stage's twiddle loads straddle N/2 (t = (j mod NS)·m), and a
// branch there diverges.
fn tw(t: u32) -> vec2<f32> {
    let w = twiddle[t & (HALF - 1u)];
    return select(w, -w, t >= HALF);
}

@compute @workgroup_size(WG)
fn main_stockham(@builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let group = wid.x + wid.y * nwg.x;
    if (group >= p.groups) {
        return;
    }
    let first = group * T;
    _ = &twiddle;  // keep the binding in the layout when one twiddle-free stage is the whole transform
    {{STAGES}}
}
