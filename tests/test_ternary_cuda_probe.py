"""benchmarks/ternary_cuda.cu (ternary's stage_x=4 algorithm in CUDA C++, a probe run on the
H200) and benchmarks/sass_mix.py, which counts the opcodes of its kernels in a SASS listing."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import sass_mix  # noqa: E402

LISTING = """
	code for sm_90
		Function : _Z5pass2ILi128ELi8ELi4ELi1EEvPK5uint4
	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
        /*0010*/                   IDP.4A.U8.U8 R4, R5, R6, R4 ;          /* 0x0000000605047226 */
        /*0020*/              @!P0 IDP.4A.S8.S8 R7, R5, R8, R7 ;          /* 0x0000000805077226 */
        /*0030*/                   LOP3.LUT R9, R5, 0x3030303, RZ, 0xc0, !PT ;
        /*0040*/                   EXIT ;
		Function : _Z5pass2ILi256ELi8ELi8ELi2EEvPK5uint4
        /*0000*/                   IADD3 R1, R2, R3, RZ ;
"""


def test_sass_mix_counts_each_functions_opcodes_predicated_or_not():
    table = sass_mix.functions(LISTING)
    assert table["_Z5pass2ILi128ELi8ELi4ELi1EEvPK5uint4"] == ["LDC", "IDP", "IDP", "LOP3", "EXIT"]
    assert table["_Z5pass2ILi256ELi8ELi8ELi2EEvPK5uint4"] == ["IADD3"]
    assert sass_mix.mangled("128,8,4,1") == "_Z5pass2ILi128ELi8ELi4ELi1EE"


def test_sass_mix_prints_the_mix_and_names_a_missing_function(tmp_path, capsys):
    path = tmp_path / "k.sass"
    path.write_text(LISTING)
    assert sass_mix.main([str(path), "128,8,4,1", "64,2,2,0"]) == 0
    out = capsys.readouterr().out
    assert "pass2<128,8,4,1>: 5 instructions" in out and "IDP 2" in out
    assert "64,2,2,0: no function _Z5pass2ILi64ELi2ELi2ELi0EE* in 2 functions" in out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the H200 machine has it)")
def test_the_cuda_probe_compiles_for_hopper(tmp_path):
    source = ROOT / "benchmarks/ternary_cuda.cu"
    run = subprocess.run(
        ["nvcc", "-O3", "-arch=sm_90", "-std=c++17", "-o", str(tmp_path / "tcu"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]


def test_vulkan_sass_splits_zstd_frames_and_prefers_the_offset_that_decodes(tmp_path):
    import vulkan_sass

    magic = bytes.fromhex("28b52ffd")
    blob = b"head" + magic + b"one" + magic + b"two"
    assert vulkan_sass.zstd_frames(blob) == [magic + b"one", magic + b"two"]
    assert vulkan_sass.zstd_frames(b"no frames") == []
    good = "        /*0000*/                   IDP.4A.U8.U8 R4, R5, R6, RZ ;\n        /*0010*/   LDS.128 R8, [R1] ;\n"
    bad = "        /*0000*/                   ?? ;\n        /*0010*/                   FSWZADD R1, R2 ;\n"
    assert vulkan_sass.decoded(good) == 2 and vulkan_sass.decoded(bad) == 0
