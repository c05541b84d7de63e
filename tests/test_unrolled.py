"""farm.catalog.unrolled: the host-unrolled WGSL of the recurrent kernels (lines repeated per
item; a workgroup's loads issued before its stores, in bounded rounds)."""

import pytest

from farm.catalog.unrolled import FETCH_BATCH, each, fetch_rounds, indent


def test_each_repeats_only_the_lines_holding_the_token():
    section = "let half = 0u;\npartial[half + $iu] = acc$i;\nbarrier();"
    assert each(section, 3) == (
        "let half = 0u;\npartial[half + 0u] = acc0;\npartial[half + 1u] = acc1;\npartial[half + 2u] = acc2;\nbarrier();"
    )
    assert each("x$a += 1;", 2, "$a") == "x0 += 1;\nx1 += 1;"


def test_fetch_rounds_issues_every_load_of_a_round_before_its_stores():
    lines = fetch_rounds("v", "n * 4u", 256, 64, ["let x{u} = src[{i}];"], "dst[{i}] = {x};")
    loads = [k for k, line in enumerate(lines) if "= src[" in line]
    stores = [k for k, line in enumerate(lines) if "dst[" in line]
    assert len(loads) == len(stores) == 4 and max(loads) < min(stores)  # 256 elements / 64 threads
    assert lines[0] == "for (var bv = lid; bv < n * 4u; bv += 256u) {"
    assert "    let iv3 = min(bv + 192u, n * 4u - 1u);" in lines  # clamped: every load in bounds
    assert "    if (bv + 192u < n * 4u) { dst[iv3] = xv3; }" in lines  # the store past n skipped
    many = fetch_rounds("q", "N", 1 << 20, 64, ["let x{u} = src[{i}];"], "dst[{i}] = {x};")
    assert sum("= src[" in line for line in many) == FETCH_BATCH  # a round is bounded; the loop does the rest
    with pytest.raises(ValueError, match="last load line must be"):
        fetch_rounds("q", "N", 64, 64, ["let y{u} = src[{i}];"], "dst[{i}] = {x};")


def test_indent_splits_multi_line_items():
    assert indent(2, ["a;\nb;", "c;"]) == "  a;\n  b;\n  c;"
