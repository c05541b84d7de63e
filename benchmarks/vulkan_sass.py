"""What the NVIDIA Vulkan driver compiled a catalog kernel into. Compiles ternary_gemv's
stage_x=4 winner (wg128 rows4 vw4 tpr8 splits1: its pass 2 is the loop that counts), as
benchmarks/ternary_hooks.py's arms name it (--arms, default the catalog's switches), with the
driver's shader disk cache (__GL_SHADER_DISK_CACHE_PATH, set here before the device is made)
in an empty folder. The cache's .bin files hold zstd frames; each decompresses to an "NVuc"
image whose machine code nvdisasm reads as a raw SM90 instruction stream at some offset (8
for the image seen on the H200, 2026-12-04): the script tries offsets 0-12 and keeps the
listing with the most common opcodes. Prints each listing's opcode mix (benchmarks/
sass_mix.py's parser) and writes the listings under --out. Needs the `zstd` and `nvdisasm`
commands: the H200 machine has nvdisasm but no zstd, so carry this machine's binary
(`mkdir -p .devkit/zstd && cp /usr/bin/zstd .devkit/zstd/`; with it .devkit and the tree
outgrow the 64 MiB a run carries, so move Ray's wheel out of .devkit/whl for that call: the
script imports no Ray).

    PATH=$PWD/.devkit/zstd:$PATH python3 benchmarks/vulkan_sass.py --out DIR [--arms catalog,chain]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path


def zstd_frames(blob: bytes) -> list[bytes]:
    """The bytes from each zstd frame's magic to the next one's (or the end): `zstd -dc`
    decodes a frame and stops at what follows it."""
    magic = bytes.fromhex("28b52ffd")
    starts = [i for i in range(len(blob) - 3) if blob[i : i + 4] == magic]
    return [blob[a:b] for a, b in zip(starts, [*starts[1:], len(blob)][: len(starts)], strict=True)]


COMMON = {"IADD3", "LOP3", "MOV", "IMAD", "LDG", "STG", "LDS", "STS", "S2R", "ISETP", "BRA", "EXIT", "SHF", "IDP"}


def decoded(listing: str) -> int:
    """How many common opcodes a raw disassembly holds: at the wrong offset nvdisasm decodes
    the bytes into rare or invalid instructions."""
    return sum(op in COMMON for ops in sass_functions(listing).values() for op in ops)


def sass_functions(listing: str) -> dict[str, list[str]]:
    """sass_mix.functions, with a raw listing (no 'Function :' line) as one function."""
    sys.path.insert(0, str(Path(__file__).parent))
    import sass_mix

    return sass_mix.functions(listing if "Function :" in listing else "Function : raw\n" + listing)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--arms", default="catalog",
                        help="ternary_hooks.py's arms to compile, comma-separated (default: catalog)")  # fmt: skip
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="glcache-"))
    os.environ.update({"__GL_SHADER_DISK_CACHE": "1", "__GL_SHADER_DISK_CACHE_PATH": str(cache),
                       "__GL_SHADER_DISK_CACHE_SKIP_CLEANUP": "1"})  # fmt: skip

    from ternary_hooks import ALL_ARMS, SPEC, _Hooks  # benchmarks/, on the path as the script's folder

    from farm.catalog.ternary_gemv import split_schedule
    from farm.gpu import Device
    from farm.oracle.launch import prepare

    problem = SPEC.problem(m=4096, k=16384)
    inputs = SPEC.generate(problem, 0)
    device = Device()
    seen: set[Path] = set()
    for arm in args.arms.split(","):
        with prepare(device, _Hooks(*ALL_ARMS[arm]), split_schedule(128, 4, 4, 8, 1), problem, inputs):
            pass
        new = sorted(p for p in cache.rglob("*.bin") if p.is_file() and p not in seen)
        print(f"arm {arm}: cache files {[p.name for p in new]}")
        seen.update(new)
    del device
    files = sorted(p for p in cache.rglob("*.bin") if p.is_file())
    print(f"cache: {len(files)} .bin files, {sum(p.stat().st_size for p in files)} bytes")
    if not shutil.which("zstd") or not shutil.which("nvdisasm"):
        print(f"needs zstd ({shutil.which('zstd')}) and nvdisasm ({shutil.which('nvdisasm')}); the cache is copied")
    else:
        images = 0
        for path in files:
            for frame in zstd_frames(path.read_bytes()):
                raw = subprocess.run(["zstd", "-dc"], input=frame, capture_output=True).stdout
                if not raw.startswith(b"NVDANVVMNVuc"):
                    continue
                images += 1
                best = ""
                for offset in (0, 4, 8, 12):
                    image = args.out / f"image{images}.{offset}.bin"
                    image.write_bytes(raw[offset:])
                    run = subprocess.run(["nvdisasm", "-b", "SM90", str(image)], capture_output=True, text=True)
                    image.unlink()
                    if decoded(run.stdout) > decoded(best):
                        best = run.stdout
                (args.out / f"image{images}.sass").write_text(best)
                ops = [op for ops in sass_functions(best).values() for op in ops]
                mix = ", ".join(f"{op} {n}" for op, n in Counter(ops).most_common(16))
                print(f"image {images} ({len(raw)} bytes): {len(ops)} instructions: {mix}")
        print(f"{images} images")
    shutil.copytree(cache, args.out / "cache", dirs_exist_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
