// 'Valid' 2-D convolution (cross-correlation, as in deep learning): y[i, j] = sum over
// a, b < k of x[i + a, j + b] * weights[a, b]. One invocation per output, workgroups of
// tile_x x tile_y outputs; with `shared` each workgroup first stages its input tile and
// halo ((tile_y + k - 1) x (tile_x + k - 1) values) in workgroup memory.
const TX: u32 = {{tile_x}}u;
const TY: u32 = {{tile_y}}u;
const K: u32 = {{k}}u;
const SHARED: bool = {{shared}};
const SX: u32 = TX + K - 1u;
const SY: u32 = TY + K - 1u;

struct Params { h: u32, w: u32, k: u32 }

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> weights: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> params: Params;

var<workgroup> tile: array<f32, SX * SY>;

@compute @workgroup_size({{tile_x}}, {{tile_y}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let ow = params.w - K + 1u;
    let oh = params.h - K + 1u;
    let x0 = wid.x * TX;
    let y0 = wid.y * TY;
    if (SHARED) {
        for (var i = lid.y * TX + lid.x; i < SX * SY; i += TX * TY) {
            let gx = x0 + i % SX;
            let gy = y0 + i / SX;
            var v = 0.0;
            if (gx < params.w && gy < params.h) {
                v = x[gy * params.w + gx];
            }
            tile[i] = v;
        }
    }
    workgroupBarrier();
    let ox = x0 + lid.x;
    let oy = y0 + lid.y;
    if (ox >= ow || oy >= oh) {
        return;
    }
    var acc = 0.0;
    for (var a = 0u; a < K; a++) {
        for (var b = 0u; b < K; b++) {
            var v: f32;
            if (SHARED) {
                v = tile[(lid.y + a) * SX + lid.x + b];
            } else {
                v = x[(oy + a) * params.w + ox + b];
            }
            acc += v * weights[a * K + b];
        }
    }
    y[oy * ow + ox] = acc;
}
