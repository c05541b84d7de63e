"""Staleness covers the Python that shapes the work: a built-in kernel's
source_hash covers its template, host_source() and code_source() (its modules' text)."""

from __future__ import annotations

import inspect
import time

from farm import catalog
from farm.catalog import _code_text, gemm_tiling, gemv, ternary_variants, user


class TweakedLaunch(gemv.Gemv):
    """gemv with its launch() changed and nothing else: template and host code are the same."""

    def launch(self, schedule, problem, inputs):
        return super().launch(schedule, problem, inputs)


def test_changing_a_builtins_launch_changes_its_hash():
    base, tweaked = catalog.get("gemv"), TweakedLaunch()
    assert tweaked.template() == base.template() and tweaked.host_source() == base.host_source()
    assert tweaked.source_hash() != base.source_hash()
    assert inspect.getsource(TweakedLaunch.launch) in tweaked.code_source()


def test_the_hash_covers_the_kernel_module_and_the_catalog_modules_it_takes_code_from():
    assert inspect.getsource(gemv) in catalog.get("gemv").code_source()
    assert inspect.getsource(gemm_tiling) in catalog.get("gemm").code_source()  # schedules, reference, launch
    assert inspect.getsource(ternary_variants) in catalog.get("ternary_gemv").code_source()
    assert "class KernelSpec(ABC)" not in catalog.get("gemv").code_source()  # the catalog's machinery is not


def test_a_builtins_hash_changes_with_its_code_text(monkeypatch):
    spec, other = type(catalog.get("gemv"))(), type(catalog.get("gemv"))()  # fresh: nothing cached
    monkeypatch.setattr(other, "code_source", lambda: spec.code_source().replace("def launch", "def  launch"))
    assert other.source_hash() != spec.source_hash() == catalog.get("gemv").source_hash()


def test_user_kernels_keep_their_own_hash_not_farms_code():
    # A user kernel's hash covers its defining file and declared values (test_user_kernels);
    # farm.catalog.user is machinery, so a farm upgrade doesn't stale every user winner.
    assert _code_text(user.Kernel) == ""


def test_code_source_is_computed_once_per_class_and_cached_per_spec():
    _code_text.cache_clear()
    specs = [type(s)() for s in catalog.all_specs() if not isinstance(s, user.Kernel)]
    started = time.perf_counter()
    hashes = [s.source_hash() for s in specs]
    first = time.perf_counter() - started
    started = time.perf_counter()
    assert [s.source_hash() for s in specs for _ in range(100)] == [h for h in hashes for _ in range(100)]
    again = (time.perf_counter() - started) / (100 * len(specs))
    assert _code_text.cache_info().misses == len(specs)
    assert first < 1.0 and again < 1e-4, (first, again)  # read once (~20 ms for all), then a dict lookup
