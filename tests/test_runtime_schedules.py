"""Where ForgeRuntime's schedule comes from: tuned → nearest → same-device → default, with a
real SQLite database written through farm.store, stale winners skipped, one warning per
fallback, and the `farm export` file round trip."""

import dataclasses
import json
import logging
import os

import numpy as np
import pytest

from farm import ForgeRuntime, catalog, cli
from farm.runtime.winners import (
    MAX_SCHEDULES_BYTES,
    Candidate,
    choose_winner,
    load_candidates,
    problem_distance,
    read_schedules_file,
)
from farm.schedule import Problem, Schedule
from farm.store import WinnerRecord, open_store, save_winner, upsert_topology, write_schedules_file

GEMV = catalog.get("gemv")
TUNED = Schedule.of(workgroup_size=128, items_per_invocation=2, vector_width=1, threads_per_row=8)
OTHER = Schedule.of(workgroup_size=32, items_per_invocation=1, vector_width=1, threads_per_row=4)


@pytest.fixture
def db(tmp_path):
    url = f"sqlite:///{tmp_path / 'farm.db'}"
    return url, open_store(url)


def winner(profile, problem, schedule, source_hash=None, kernel="gemv"):
    return WinnerRecord(
        topology_hash=profile.topology_hash(),
        kernel=kernel,
        problem_key=problem.key(),
        source_hash=source_hash or catalog.get(kernel).source_hash(),
        schedule_key=schedule.key(),
        median_ns=1000.0,
        default_median_ns=2000.0,
        speedup=2.0,
        device_name=profile.device_name,
    )


def store_winner(store, profile, problem, schedule, **kw):
    upsert_topology(store, profile)
    save_winner(store, winner(profile, problem, schedule, **kw))


def other_driver(profile):
    """The same device under another driver: a different topology hash, the same device name."""
    return dataclasses.replace(profile, driver_description=profile.driver_description + " (older driver)")


def test_a_multi_pass_winner_runs_through_the_runtime(device, db):
    # ternary_gemv stage_x=4 (a three-pass winner): planes pass, loop over 2 split ranges, split sum
    from farm.catalog.ternary_gemv import pack_codes, split_schedule, unpack_ternary

    url, store = db
    m, k = 37, 4160
    problem = catalog.get("ternary_gemv").problem(m=m, k=k)
    split = split_schedule(64, 2, 4, 4, 2)
    store_winner(store, device.profile, problem, split, kernel="ternary_gemv")
    rt = ForgeRuntime(db=url, device=device)
    assert rt.tuned_schedule("ternary_gemv", problem) == (split, "tuned")
    rng = np.random.default_rng(3)
    packed = pack_codes(rng.integers(0, 4, (m, k)))
    x = rng.integers(-8, 9, k).astype(np.float32)
    scale = np.full(m, 0.5, np.float32)
    want = 0.5 * (unpack_ternary(packed, m, k).astype(np.float64) @ x)
    np.testing.assert_array_equal(rt.ternary_gemv(x, packed, scale, m, k), want)  # exact on small integers


def test_exact_winner_is_tuned(device, db):
    url, store = db
    problem = GEMV.problem(m=40, n=64)
    store_winner(store, device.profile, problem, TUNED)
    rt = ForgeRuntime(db=url, device=device)
    assert rt.tuned_schedule("gemv", problem) == (TUNED, "tuned")
    a = np.arange(40 * 64, dtype=np.float32).reshape(40, 64) / 1000
    x = np.ones(64, np.float32)
    np.testing.assert_allclose(rt.gemv(a, x), a.astype(np.float64) @ x, rtol=1e-5)


def test_nearest_tuned_problem_in_log_space(device, db, caplog):
    url, store = db
    store_winner(store, device.profile, GEMV.problem(m=64, n=64), OTHER)
    store_winner(store, device.profile, GEMV.problem(m=4096, n=4096), TUNED)
    rt = ForgeRuntime(db=url, device=device)
    with caplog.at_level(logging.WARNING, logger="farm.runtime"):
        assert rt.tuned_schedule("gemv", GEMV.problem(m=2000, n=3000)) == (TUNED, "nearest")
        assert rt.tuned_schedule("gemv", GEMV.problem(m=100, n=50)) == (OTHER, "nearest")
    assert sum("nearest winner tuned for m=4096,n=4096" in r.message for r in caplog.records) == 1


def test_same_device_under_another_driver(device, db):
    url, store = db
    store_winner(store, other_driver(device.profile), GEMV.problem(m=256, n=256), TUNED)
    rt = ForgeRuntime(db=url, device=device)
    assert rt.tuned_schedule("gemv", GEMV.problem(m=300, n=200)) == (TUNED, "same-device")


def test_same_topology_beats_same_device(device, db):
    url, store = db
    problem = GEMV.problem(m=256, n=256)
    store_winner(store, other_driver(device.profile), problem, TUNED)
    store_winner(store, device.profile, GEMV.problem(m=8, n=8), OTHER)
    rt = ForgeRuntime(db=url, device=device)
    assert rt.tuned_schedule("gemv", problem) == (OTHER, "nearest")


def test_another_device_is_never_used(device, db):
    url, store = db
    stranger = dataclasses.replace(device.profile, device_name="Some Other GPU", device_id=12345)
    store_winner(store, stranger, GEMV.problem(m=256, n=256), TUNED)
    rt = ForgeRuntime(db=url, device=device)
    assert rt.tuned_schedule("gemv", GEMV.problem(m=256, n=256)) == (GEMV.default, "default")


def test_stale_winner_is_skipped(device, db):
    url, store = db
    problem = GEMV.problem(m=256, n=256)
    store_winner(store, device.profile, problem, TUNED, source_hash="0" * 16)  # tuned against older WGSL
    store_winner(store, device.profile, GEMV.problem(m=512, n=512), OTHER)
    rt = ForgeRuntime(db=url, device=device)
    assert rt.tuned_schedule("gemv", problem) == (OTHER, "nearest")


def test_only_stale_winners_means_default(device, db):
    url, store = db
    problem = GEMV.problem(m=256, n=256)
    store_winner(store, device.profile, problem, TUNED, source_hash="0" * 16)
    rt = ForgeRuntime(db=url, device=device)
    assert rt.tuned_schedule("gemv", problem) == (GEMV.default, "default")


def test_winner_invalid_for_the_call_falls_back_to_default(device, db, caplog):
    url, store = db
    vec4 = Schedule.of(workgroup_size=64, items_per_invocation=1, vector_width=4, threads_per_row=8)
    store_winner(store, device.profile, GEMV.problem(m=64, n=64), vec4)
    rt = ForgeRuntime(db=url, device=device)
    odd = GEMV.problem(m=64, n=63)  # vector width 4 does not divide n
    with caplog.at_level(logging.WARNING, logger="farm.runtime"):
        assert rt.tuned_schedule("gemv", odd) == (GEMV.default, "default")
        a = np.ones((64, 63), np.float32)
        np.testing.assert_array_equal(rt.gemv(a, np.ones(63, np.float32)), np.full(64, 63.0))
    assert any("vector_width 4 does not divide n=63" in r.message for r in caplog.records)
    assert rt.tuned_schedule("gemv", GEMV.problem(m=64, n=64)) == (vec4, "tuned")


def test_topk_output_never_depends_on_the_tuned_block(device, db, tmp_path):
    """A winner of block 32 changes neither the global top-k nor the per-block layout the
    caller asks for; k above a block the caller gives is a ValueError naming it."""
    url, store = db
    topk = catalog.get("topk")
    small = Schedule.of(workgroup_size=32, items_per_invocation=1, vector_width=1)
    store_winner(store, device.profile, topk.problem(n=100, k=8), small, kernel="topk")
    tuned = ForgeRuntime(db=url, device=device)
    untuned = ForgeRuntime(db=f"sqlite:///{tmp_path / 'empty.db'}", device=device)
    x = np.arange(100, dtype=np.float32)
    for rt in (tuned, untuned):
        np.testing.assert_array_equal(rt.topk(x, 40), np.arange(99, 59, -1))
        np.testing.assert_array_equal(rt.topk(x, 8, block=64)[:8], np.arange(63, 55, -1))
        assert rt.topk(x, 8, block=64).shape == (2 * 8,)
    with pytest.raises(ValueError, match=r"k: expected an integer in 1\.\.32, got 40"):
        tuned.topk(x, 40, block=32)
    assert tuned.tuned_schedule("topk", topk.problem(n=100, k=40)) == (small, "nearest")


def test_topk_winner_invalid_for_another_reason_keeps_its_block(device, db, caplog):
    url, store = db
    topk = catalog.get("topk")
    vec4 = Schedule.of(workgroup_size=128, items_per_invocation=2, vector_width=4)
    store_winner(store, device.profile, topk.problem(n=400, k=8), vec4, kernel="topk")
    rt = ForgeRuntime(db=url, device=device)
    odd = topk.problem(n=401, k=8)  # vector width 4 does not divide n
    with caplog.at_level(logging.WARNING, logger="farm.runtime"):
        schedule, source = rt.tuned_schedule("topk", odd)
    assert (schedule.workgroup_size, schedule.vector_width, source) == (128, 1, "nearest")
    assert any("same result (block=128)" in r.message for r in caplog.records)
    x = np.random.default_rng(5).standard_normal(401).astype(np.float32)
    out = rt.topk(x, 8, block=128)
    assert out.shape == (4 * 8,)
    np.testing.assert_array_equal(out[:8], np.sort(x[:128])[::-1][:8])
    np.testing.assert_array_equal(rt.topk(x, 8), np.sort(x)[::-1][:8])


def test_empty_database_gives_defaults_with_one_warning(device, db, caplog):
    url, _ = db
    rt = ForgeRuntime(db=url, device=device)
    with caplog.at_level(logging.WARNING, logger="farm.runtime"):
        for _ in range(3):
            rt.gemv(np.ones((2, 3), np.float32), np.ones(3, np.float32))
    messages = [r.message for r in caplog.records]
    assert sum("holds no winners" in m for m in messages) == 1
    assert sum("gemv m=2,n=3: no tuned winner" in m for m in messages) == 1


def test_unreachable_database_gives_defaults_not_an_error(device, caplog):
    rt = ForgeRuntime(db="postgresql://farm:secret@127.0.0.1:9/farm", device=device)  # port 9: discard
    with caplog.at_level(logging.WARNING, logger="farm.runtime"):
        out = rt.gemv(np.ones((2, 3), np.float32), np.ones(3, np.float32))
    np.testing.assert_array_equal(out, [3.0, 3.0])
    assert rt.tuned_schedule("gemv", GEMV.problem(m=2, n=3)) == (GEMV.default, "default")
    unavailable = [r.message for r in caplog.records if "unavailable" in r.message or "unreachable" in r.message]
    assert len(unavailable) == 1 and "secret" not in unavailable[0]


def test_default_database_comes_from_farm_home(device, farm_home):
    store = open_store(f"sqlite:///{farm_home / 'farm.db'}")
    problem = GEMV.problem(m=10, n=10)
    store_winner(store, device.profile, problem, TUNED)
    assert ForgeRuntime(device=device).tuned_schedule("gemv", problem) == (TUNED, "tuned")


def test_winners_are_read_once_per_runtime(device, db):
    url, store = db
    problem = GEMV.problem(m=16, n=16)
    rt = ForgeRuntime(db=url, device=device)
    assert rt.tuned_schedule("gemv", problem)[1] == "default"
    store_winner(store, device.profile, problem, TUNED)  # written after the runtime read the table
    assert rt.tuned_schedule("gemv", GEMV.problem(m=17, n=17))[1] == "default"
    assert ForgeRuntime(db=url, device=device).tuned_schedule("gemv", problem) == (TUNED, "tuned")


def test_export_import_round_trip(device, db, tmp_path):
    url, store = db
    store_winner(store, device.profile, GEMV.problem(m=40, n=64), TUNED)
    store_winner(
        store,
        device.profile,
        catalog.get("fft").problem(n=64, batch=4),
        Schedule.of(workgroup_size=32, items_per_invocation=2, vector_width=2),
        kernel="fft",
    )
    path = tmp_path / "winners.json"
    assert cli.main(["export", "--topology", device.profile.topology_hash(), "--out", str(path), "--db", url]) == 0
    shipped = ForgeRuntime(schedules=path, device=device, db="postgresql://nobody@127.0.0.1:9/none")
    assert shipped.tuned_schedule("gemv", GEMV.problem(m=40, n=64)) == (TUNED, "tuned")
    fft_schedule, source = shipped.tuned_schedule("fft", catalog.get("fft").problem(n=64, batch=4))
    assert (fft_schedule.items_per_invocation, fft_schedule.vector_width, source) == (2, 2, "tuned")
    z = np.exp(2j * np.pi * np.arange(64) * 5 / 64).astype(np.complex64)[None].repeat(4, axis=0)
    np.testing.assert_allclose(shipped.fft(z), np.fft.fft(z), atol=1e-3)


def test_schedules_file_from_another_machine_is_never_matched(device, db, tmp_path):
    url, store = db
    stranger = dataclasses.replace(device.profile, device_name="Some Other GPU", device_id=12345)
    store_winner(store, stranger, GEMV.problem(m=40, n=64), TUNED)
    path = tmp_path / "theirs.json"
    write_schedules_file(store, stranger.topology_hash(), path)
    shipped = ForgeRuntime(schedules=path, device=device)
    assert shipped.tuned_schedule("gemv", GEMV.problem(m=40, n=64)) == (GEMV.default, "default")


def test_schedules_file_must_exist(device, tmp_path):
    with pytest.raises(FileNotFoundError, match="absent.json"):
        ForgeRuntime(schedules=tmp_path / "absent.json", device=device)


def test_malformed_schedules_file_fails_at_construction(device, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"format": "something-else"}')
    with pytest.raises(ValueError, match="farm-schedules/1"):
        ForgeRuntime(schedules=path, device=device)


def test_problem_distance_is_log_space_and_refuses_other_dims():
    assert problem_distance(Problem.of(m=128, n=128), Problem.of(m=256, n=128)) == 1.0
    assert problem_distance(Problem.of(m=4096, n=1), Problem.of(m=8192, n=1)) == 1.0
    assert problem_distance(Problem.of(m=1, n=1), Problem.of(m=1, k=1)) == float("inf")


def test_choose_winner_orders_sources(device):
    profile = device.profile
    mine = Candidate(profile.topology_hash(), "gemv", "m=8,n=8", GEMV.source_hash(), TUNED.key(), profile.device_name)
    assert choose_winner([mine], GEMV, GEMV.problem(m=8, n=8), profile)[1] == "tuned"
    assert choose_winner([mine], GEMV, GEMV.problem(m=9, n=8), profile)[1] == "nearest"
    moved = dataclasses.replace(mine, topology_hash="other")
    assert choose_winner([moved], GEMV, GEMV.problem(m=9, n=8), profile)[1] == "same-device"
    assert choose_winner([], GEMV, GEMV.problem(m=9, n=8), profile) == (None, "default")


# -- malformed schedules files: ValueError naming the file and the entry --------------------


def _file(tmp_path, winners=None, raw=None, **top):
    path = tmp_path / "winners.json"
    if raw is not None:
        path.write_bytes(raw if isinstance(raw, bytes) else raw.encode())
        return path
    document = {"format": "farm-schedules/1", "topology_hash": "t" * 64, "device_name": "gpu"} | top
    document["winners"] = winners if winners is not None else []
    path.write_text(json.dumps(document).replace('"@1e400"', "1e400"))  # a literal json.dumps can't write
    return path


def _entry(**changes):
    entry = {
        "kernel": "gemv",
        "problem": "m=40,n=64",
        "schedule": {"workgroup_size": 128, "items_per_invocation": 2, "vector_width": 1},
        "source_hash": "abc",
        "median_ns": 1234.5,
        "speedup": 1.5,
    }
    return entry | changes


def _knobs(**changes):
    return {"workgroup_size": 128, "items_per_invocation": 2, "vector_width": 1} | changes


BAD_WHOLE_FILES = {
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", r"byte 0 \(b'\\x89'\) is not UTF-8"),
    "latin1": ('{"format": "farm-schedules/1", "device_name": "caf\xe9"}'.encode("latin-1"), "is not UTF-8"),
    "deep_nesting": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "deep_nesting_in_an_entry": (
        '{"format": "farm-schedules/1", "topology_hash": "t", "winners": [' + "[" * 50_000 + "]" * 50_000 + "]}",
        "nested too deeply",
    ),
    "huge_integer_literal": ('{"format": "farm-schedules/1", "x": ' + "9" * 5000 + "}", "not JSON"),
    "nan_literal": ('{"format": "farm-schedules/1", "topology_hash": "t", "winners": [], "x": NaN}', "NaN is not"),
    "not_an_object": ("[1, 2]", "found 'list'"),
    "empty": ("", "not JSON"),
}


@pytest.mark.parametrize("case", sorted(BAD_WHOLE_FILES))
def test_malformed_schedules_file_is_a_value_error_naming_the_file(device, tmp_path, case):
    raw, message = BAD_WHOLE_FILES[case]
    path = _file(tmp_path, raw=raw)
    with pytest.raises(ValueError, match=message) as info:
        ForgeRuntime(schedules=path, device=device)
    assert str(path) in str(info.value)


BAD_ENTRIES = {
    "wg_float": (_entry(schedule=_knobs(workgroup_size=256.5)), "knob 'workgroup_size' must be an integer.*256.5"),
    "wg_float_integral": (_entry(schedule=_knobs(workgroup_size=256.0)), "'workgroup_size' must be an integer"),
    "wg_string": (_entry(schedule=_knobs(workgroup_size="256")), r"'workgroup_size' must be an integer.*'256' \(str\)"),
    "wg_true": (_entry(schedule=_knobs(workgroup_size=True)), r"'workgroup_size' must be an integer.*True \(bool\)"),
    "wg_null": (_entry(schedule=_knobs(workgroup_size=None)), "'workgroup_size' must be an integer"),
    "wg_huge": (
        _entry(schedule=_knobs(workgroup_size=10**30)),
        r"'workgroup_size' must be an integer in 0\.\.2147483647",
    ),
    "wg_1e400": (_entry(schedule=_knobs(workgroup_size="@1e400")), "'workgroup_size' must be an integer"),
    "knob_negative": (_entry(schedule=_knobs(threads_per_row=-4)), "'threads_per_row' must be an integer"),
    "knob_list": (_entry(schedule=_knobs(tile=[[[[1]]]])), r"'tile' must be an integer.*\[\[\[\.\.\.\]\]\]"),
    "schedule_empty": (_entry(schedule={}), "schedule must be an object"),
    "schedule_list": (_entry(schedule=[64]), "schedule must be an object"),
    "schedule_bad_string": (_entry(schedule="workgroup_size=64"), "schedule is a string but not a JSON object"),
    "schedule_string_float": (_entry(schedule='{"workgroup_size": 64.5}'), "'workgroup_size' must be an integer"),
    "median_huge": (_entry(median_ns="@1e400"), "median_ns must be a finite positive number"),
    "median_huge_int": (_entry(median_ns=10**400), "median_ns must be a finite positive number"),
    "median_string": (_entry(median_ns="5"), "median_ns must be a finite positive number"),
    "median_bool": (_entry(median_ns=True), "median_ns must be a finite positive number"),
    "median_negative": (_entry(median_ns=-1), "median_ns must be a finite positive number, got -1"),
    "median_zero": (_entry(median_ns=0.0), "median_ns must be a finite positive number, got 0.0"),
    "speedup_negative": (_entry(speedup=-2.0), "speedup must be a finite positive number"),
    "problem_float": (_entry(problem="m=4.5,n=8"), "problem must look like"),
    "problem_huge": (_entry(problem="m=99999999999999999999,n=8"), "problem must look like"),
    "problem_over_int64": (_entry(problem="m=9999999999999999999,n=8"), "exceeds"),
    "problem_repeated": (_entry(problem="m=4,m=8"), "repeats a dimension"),
    "problem_unicode_digits": (_entry(problem="m=\u0663"), "problem must look like"),
    "problem_not_string": (_entry(problem={"m": 4}), "problem must be a string"),
    "kernel_number": (_entry(kernel=5), "kernel must be a string"),
    "source_hash_null": (_entry(source_hash=None), "source_hash must be a string"),
    "entry_not_object": ("gemv", "is str, expected an object"),
    "entry_missing": ({"kernel": "gemv"}, r"lacks \['problem', 'schedule', 'source_hash', 'median_ns'\]"),
}


@pytest.mark.parametrize("case", sorted(BAD_ENTRIES))
def test_malformed_schedules_entry_is_a_value_error_naming_file_and_entry(device, tmp_path, case):
    bad, message = BAD_ENTRIES[case]
    path = _file(tmp_path, [_entry(), bad])
    with pytest.raises(ValueError, match=message) as info:
        ForgeRuntime(schedules=path, device=device)
    assert f"{path}: winners[1]" in str(info.value)
    assert len(str(info.value)) < 400  # huge or deep values are quoted short


@pytest.mark.parametrize(
    "top,message",
    [
        ({"topology_hash": 5}, "needs a string 'topology_hash'"),
        ({"winners": {"a": 1}}, "a list 'winners'"),
        ({"device_name": ["gpu"]}, "device_name must be a string"),
        ({"format": "farm-schedules/2"}, "expected format 'farm-schedules/1', found 'farm-schedules/2'"),
    ],
)
def test_malformed_schedules_header_is_a_value_error_naming_the_file(device, tmp_path, top, message):
    path = tmp_path / "winners.json"
    document = {"format": "farm-schedules/1", "topology_hash": "t", "winners": []} | top
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match=message) as info:
        ForgeRuntime(schedules=path, device=device)
    assert str(path) in str(info.value)


def test_schedules_directory_or_fifo_is_a_value_error_from_the_reader(tmp_path):
    with pytest.raises(ValueError, match=f"{tmp_path} is a directory, not a regular file; expected a farm-schedules/1"):
        load_candidates(None, tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="is a FIFO"):
        read_schedules_file(fifo)  # reading it would block
    with pytest.raises(ValueError, match="/dev/zero is a character device"):
        read_schedules_file("/dev/zero")  # reading it would never end
    big = tmp_path / "big.json"
    with big.open("wb") as handle:
        handle.truncate(MAX_SCHEDULES_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ValueError, match="over the"):
        read_schedules_file(big)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(ValueError, match="Too many levels of symbolic links"):
        read_schedules_file(tmp_path / "loop")
    with pytest.raises(FileNotFoundError, match="absent.json does not exist"):
        read_schedules_file(tmp_path / "absent.json")


def test_a_good_file_with_a_bom_and_a_string_schedule_still_loads(device, tmp_path):
    path = tmp_path / "winners.json"
    key = Schedule.of(workgroup_size=128, items_per_invocation=2, vector_width=1).key()
    document = {"format": "farm-schedules/1", "topology_hash": device.profile.topology_hash(), "winners": []}
    document["winners"] = [_entry(schedule=key, source_hash=GEMV.source_hash(), speedup=None)]
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(document).encode())
    rt = ForgeRuntime(schedules=path, device=device)
    assert rt.tuned_schedule("gemv", GEMV.problem(m=40, n=64)) == (Schedule.from_key(key), "tuned")


def test_runtime_and_store_agree_on_the_format_name():
    from farm.runtime import winners
    from farm.store import SCHEDULES_FORMAT

    assert winners.SCHEDULES_FORMAT == SCHEDULES_FORMAT
