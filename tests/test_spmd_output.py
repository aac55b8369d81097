"""What an SPMD cell shows, without a cluster: the ranks' lines in the order they were printed and live, alike lines
merged, framework noise left out; the status table on one line per rank with the group's line in it; a failing
rank's traceback with library frames folded; how a rank process ended, in words; arguments named in errors."""

from __future__ import annotations

import pickle

import pytest
from IPython.core.error import UsageError

from gpu_magics.display.format import STRIPES
from gpu_magics.spmd.kernel.view.output import LineMerger, is_noise
from gpu_magics.spmd.kernel.view.results import (
    RankOutcome,
    RankState,
    SpmdResult,
    StatusView,
    clip,
    ended_line,
    exit_words,
    group_note,
    leading,
    other_line,
)
from gpu_magics.spmd.kernel.view.stalls import describe
from gpu_magics.spmd.kernel.world import Member, World, check_ranks, order
from gpu_magics.spmd.messages import NEVER_RAN, ended_reply, stopped_reply
from gpu_magics.spmd.rank.repl import _describe, building, library, run_cell

GLOO = "[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1"


def texts(shown: list) -> list[str]:
    return [line.text for line in shown]


def test_a_lockstep_loop_shows_in_the_order_printed_and_alike_last_lines_merge() -> None:
    """Rank 0 prints every 25 steps, both print "done": rank 1's "done" reaches the kernel first."""
    merger = LineMerger([0, 1], hold=0.3)
    merger.add(1, [(0, "out", "done", 4.01)], now=4.05)
    steps = [(i, "out", f"step {25 * i}", float(i)) for i in range(4)]
    merger.add(0, [*steps, (4, "out", "done", 4.0)], now=4.1)
    assert texts(merger.ready(now=4.1)) == ["[0] step 0", "[0] step 25", "[0] step 50", "[0] step 75", "[0,1] done"]


def test_a_line_only_one_rank_prints_shows_live_after_the_hold_while_the_others_run() -> None:
    merger = LineMerger([0, 1], hold=0.3)
    merger.add(0, [(0, "out", "step 0", 0.0)], now=0.0)
    assert merger.ready(now=0.1) == []  # rank 1 may print it too
    assert texts(merger.ready(now=0.3)) == ["[0] step 0"]  # rank 1 still runs: shown anyway
    merger.add(0, [(1, "out", "step 25", 1.0)], now=1.0)
    assert texts(merger.ready(now=1.31)) == ["[0] step 25"]


def test_a_line_waits_for_lines_printed_before_it_on_any_rank_and_any_stream() -> None:
    merger = LineMerger([0, 1], hold=0.3)
    merger.add(1, [(0, "err", "warning from 1", 2.0)], now=2.0)
    merger.add(0, [(0, "out", "first from 0", 1.0)], now=2.1)  # printed earlier, arrived later
    shown = merger.ready(now=2.5)
    assert [(line.stream, line.text) for line in shown] == [("out", "[0] first from 0"), ("err", "[1] warning from 1")]


def test_lines_that_differ_by_rank_in_lockstep_show_at_once() -> None:
    merger = LineMerger([0, 1, 2], hold=10.0)
    for rank in range(3):
        merger.add(rank, [(0, "out", f"rank says {rank}", 1.0)], now=1.0)
    assert texts(merger.ready(now=1.0)) == ["[0] rank says 0", "[1] rank says 1", "[2] rank says 2"]


def test_gloos_connection_lines_are_left_out_and_kept_for_the_log() -> None:
    assert is_noise(GLOO) and not is_noise("[Gloo] my own line")
    merger = LineMerger([0, 1], hold=0.3)
    merger.add(0, [(0, "err", GLOO, 1.0), (1, "out", "hello", 1.1)], now=1.1)
    merger.add(1, [(0, "out", "hello", 1.1)], now=1.1)
    assert texts(merger.flush()) == ["[0,1] hello"]
    assert merger.noise == [(0, GLOO)]


def outcome(rank: int, state: RankState, message: str = "") -> RankOutcome:
    error = {"type": "RuntimeError", "message": message} if state == RankState.FAILED else None
    return RankOutcome(rank, "127.0.0.1 · CPU", state, error=error, seconds=0.5)


def test_a_long_error_is_clipped_in_the_table_so_every_row_stays_one_line() -> None:
    long = "mat1 and mat2 shapes cannot be multiplied (2x5 and 4x3) " * 4 + "\nsecond line"
    view = StatusView(
        "2 ranks on 1 host (CPU)", [outcome(0, RankState.DONE), outcome(1, RankState.FAILED, long)], 1.0, True, False
    )
    rows = repr(view).splitlines()
    assert len(rows) == 4 and all(len(row) < 120 for row in rows), rows
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied" in rows[3] and rows[3].count("…") == 1
    html = view._repr_html_()
    assert html.count("white-space:nowrap") == 2 * 4 and "second line" not in html
    assert clip("short") == "short" and clip("one\ntwo") == "one …"


def test_a_stalled_ranks_note_is_a_line_under_its_row_not_a_column() -> None:
    note = "no output for 31 s · all_reduce #3 (gloo) waits for rank 1, which never entered it (cell line 4)"
    waiting = outcome(0, RankState.RUNNING)
    waiting.note = note
    view = StatusView("2 ranks on 1 host (2 GPUs)", [waiting, outcome(1, RankState.RUNNING)], 31.0, False, True)
    assert view.columns == ("rank", "where", "state", "time", "GPU util · memory")  # four columns and the GPU's
    lines = repr(view).splitlines()
    assert lines[2].split() == ["rank", "0", "127.0.0.1", "·", "CPU", "running", "500", "ms"]
    assert lines[3] == f"    ↳ {note}" and lines[4].startswith("  rank 1")
    html = view._repr_html_()
    assert html.count("<tr") == 4  # the header, two ranks and rank 0's note
    assert html.count(STRIPES[0]) == 2 and html.count(STRIPES[1]) == 1  # the note keeps rank 0's stripe
    assert "<td colspan='5' style='text-align:left;padding:0 8px 2px 24px'><span class='gpu-magics-spmd-note'" in html
    assert html.index("rank 0") < html.index("no output for 31 s") < html.index("rank 1")


def test_the_group_made_for_a_cell_is_a_line_of_its_one_table() -> None:
    notes = [group_note("torch.distributed: gloo group of 2", 1.97)]
    view = StatusView(
        "2 ranks on 1 host (CPU)", [outcome(0, RankState.DONE), outcome(1, RankState.DONE)], 2.7, True, False, notes
    )
    lines = repr(view).splitlines()
    assert lines[0] == "spmd · 2 ranks on 1 host (CPU) · 2 done in 2.70 s"
    assert lines[1] == "  torch.distributed: gloo group of 2 made in 1.97 s"
    assert "gloo group of 2 made in 1.97 s" in view._repr_html_()


def test_a_group_made_again_says_so_once_with_its_time_and_a_kept_one_as_the_rank_said() -> None:
    again = group_note("torch.distributed: nccl group of 4 made again", 2.43)
    assert again == "torch.distributed: nccl group of 4 made again in 2.43 s" and "(" not in again
    assert group_note("jax.distributed: 2 processes", 0.5) == "jax.distributed: 2 processes made in 500 ms"
    kept = "torch.distributed: gloo group of 2 (kept)"
    assert group_note(kept, 0.01) == kept


def test_a_rank_stopped_before_its_cell_reached_it_says_so_and_shows_no_time() -> None:
    never = RankOutcome(1, "127.0.0.1 · CPU", RankState.STOPPED, error=stopped_reply()["error"], seconds=0.0)
    stopped = RankOutcome(0, "127.0.0.1 · CPU", RankState.STOPPED, seconds=1.5)
    view = StatusView("2 ranks on 1 host (CPU)", [stopped, never], 1.6, True, False)
    lines = repr(view).splitlines()
    assert lines[2].split()[-3:] == ["stopped", "1.50", "s"]
    assert lines[3].split()[-4:] == ["stopped", "before", "it", "ran"]  # no "0.00 us"
    assert never.never_ran and not stopped.never_ran and NEVER_RAN == "stopped before it ran"
    assert other_line(never) == "stopped before it ran" and other_line(stopped) == "stopped"


def test_the_rows_of_a_group_made_before_the_cells_code_stay_running() -> None:
    made = [outcome(0, RankState.DONE), outcome(1, RankState.DONE)]
    shown = leading(made)
    assert [o.state for o in shown] == [RankState.RUNNING, RankState.RUNNING]
    assert [o.state for o in made] == [RankState.DONE, RankState.DONE]  # the outcomes themselves are kept
    assert "2 running for" in repr(StatusView("2 ranks on 1 host (CPU)", shown, 1.0, False, False))
    assert [o.state for o in leading([outcome(0, RankState.FAILED, "boom")])] == [RankState.FAILED]


def test_only_a_rank_that_may_have_been_inside_a_collective_puts_the_group_out_of_step() -> None:
    def stopped(entered: int | None) -> RankOutcome:
        return RankOutcome(1, "127.0.0.1 · CPU", RankState.STOPPED, collectives=entered)

    assert not stopped(0).cut_short  # stopped before it entered any: another rank's NameError
    assert stopped(1).cut_short and stopped(None).cut_short  # it entered one, or cannot tell
    assert not RankOutcome(0, "h · CPU", RankState.FAILED, collectives=0).cut_short
    assert not RankOutcome(0, "h · CPU", RankState.DONE, collectives=3).cut_short


def test_rank_states_are_strings_so_saved_results_and_their_rows_read_as_before() -> None:
    assert [str(state) for state in RankState] == ["running", "done", "failed", "stopped", "ended"]
    result = SpmdResult("1 rank on 1 host (CPU)", [RankOutcome(0, "a · CPU", RankState.DONE, value=3)], 1.0)
    kept = pickle.loads(pickle.dumps(result))  # ``-o NAME`` kept, then saved and loaded
    assert kept.outcomes[0].state == "done" and f"{kept.outcomes[0].state}" == "done"
    assert repr(kept) == "SpmdResult: 1 rank on 1 host (CPU), 1.00 s\n  rank 0: 3"
    for state in RankState:  # the enum's docstring draws every state's way in
        assert state.name in (RankState.__doc__ or "")


def test_a_rank_that_ended_before_its_command_ran_says_so_in_its_reply() -> None:
    reply = ended_reply(-9, oom=True, before=True)
    assert reply == {
        "op": "done",
        "ok": False,
        "ended": True,
        "exit_code": -9,
        "oom": True,
        "error": None,
        "before": True,
    }


@pytest.mark.parametrize(
    ("code", "oom", "words"),
    [
        (3, False, "exit code 3"),
        (0, False, "exit code 0"),
        (-9, False, "SIGKILL"),
        (-9, True, "SIGKILL: killed by the OOM killer"),
        (-11, False, "SIGSEGV"),
        (None, False, "exit status unknown"),
    ],
)
def test_how_a_rank_process_ended_in_words(code: int | None, oom: bool, words: str) -> None:
    assert exit_words(code, oom) == words


def test_ranks_that_were_ended_are_named_with_the_right_grammar() -> None:
    one = ended_line([0], {}, 3.0)
    assert one.startswith("rank 0 did not stop within 3 s and was ended: the next SPMD cell starts new ranks")
    assert ended_line([0, 2], {}, 3.0).startswith("ranks 0, 2 did not stop within 3 s and were ended:")
    assert ended_line([], {1: "exit code 3"}, 3.0).startswith("the process of rank 1 ended:")


def test_a_failing_ranks_traceback_folds_library_frames_and_keeps_the_users() -> None:
    code = "import json\ndef parse(text):\n    return json.loads(text)\nparse('{')\n"
    with pytest.raises(ValueError) as caught:
        run_cell({}, code, "<rank cell 7>")
    described = _describe(caught.value)
    shown = described["traceback"]
    assert 'File "<rank cell 7>", line 4, in <module>' in shown and "return json.loads(text)" in shown
    assert "  ... 3 frames in json\n" in shown and "decoder.py" not in shown
    assert "repl.py" not in shown and "repl.py" not in described["full"]
    assert "decoder.py" in described["full"]  # -o keeps every frame
    assert shown.rstrip().endswith("line 1 column 2 (char 1)")


def test_library_frames_are_told_apart_from_the_users_own() -> None:
    import json

    import IPython

    assert library(json.__file__) == "json" and library(IPython.__file__) == "IPython"
    assert library("<rank cell 3>") is None and library("/home/me/project/train.py") is None
    assert library("<frozen importlib._bootstrap>") == "importlib"


def test_ranks_outside_the_world_are_refused_naming_what_the_user_wrote() -> None:
    made = World(order([Member(f"tcp://a:{i}", f"w{i}", "a") for i in range(2)]), 1, 2)
    with pytest.raises(UsageError) as caught:
        made.select([5], "spmd.pull('y', rank=5)")
    assert str(caught.value) == "spmd.pull('y', rank=5): no rank 5; the world has ranks 0-1 (2 ranks on 1 host (CPU))"
    with pytest.raises(UsageError, match=r"^%gpurun spmd --ranks: no rank 7; the world has ranks 0-1 \(2 ranks"):
        check_ranks([0, 7], 2, "%gpurun spmd --ranks", "2 ranks, one per worker of the cluster")
    with pytest.raises(UsageError, match="no rank -1"):
        check_ranks([-1], 2, "spmd.push(ranks=[-1])", "")


def test_gpu_ranks_start_with_jaxs_preallocation_off_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_magics.spmd.worker.rank_env import with_defaults

    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    gpu_env = {"GPU_MAGICS_SPMD_DEVICE": "gpu", "RANK": "0"}
    made = with_defaults(gpu_env)
    assert made["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert made["GPU_MAGICS_SPMD_DEFAULTED"] == "XLA_PYTHON_CLIENT_PREALLOCATE"
    assert with_defaults({"GPU_MAGICS_SPMD_DEVICE": "cpu"}) == {"GPU_MAGICS_SPMD_DEVICE": "cpu"}
    chosen = {**gpu_env, "XLA_PYTHON_CLIENT_PREALLOCATE": "true"}  # the kernel passed the user's value
    assert with_defaults(chosen) == chosen
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")  # the worker's own environment has one
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in with_defaults(gpu_env)


def test_the_kernels_choice_of_jax_memory_reaches_every_rank() -> None:
    gpu = Member("tcp://a:1", "w", "a", "GPU-a-0", "0", "H100", has_jax=True)
    made = World(order([gpu]), 1, 2, user_env=(("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.3"),))
    assert made.env(made.ranks[0])["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.3"
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in World(order([gpu]), 1, 2).env(made.ranks[0])


def test_the_status_row_shows_the_ranks_own_gpu_memory_where_known() -> None:
    mine = RankOutcome(0, "a · GPU 0", RankState.DONE, seconds=0.1, gpu_util=40.0, gpu_memory=3 * 2**30)
    mine.gpu_memory_total, mine.rank_memory = 80 * 2**30, 2**30
    other = RankOutcome(1, "a · GPU 1", RankState.DONE, seconds=0.1, gpu_util=40.0, gpu_memory=3 * 2**30)
    text = repr(StatusView("2 ranks on 1 host (2 GPUs)", [mine, other], 0.2, True, True))
    assert "40% · rank 1.0 GiB (GPU 3.0 GiB/80.0 GiB)" in text
    assert text.splitlines()[-1].count("GiB") == 1  # rank 1's own is not known: the GPU's only


def test_a_line_redrawn_with_carriage_returns_keeps_its_last_state() -> None:
    from gpu_magics.spmd.worker.rank_process import last_update

    assert last_update("\r  0%|          | 0/100\r 45%|####5     | 45/100") == " 45%|####5     | 45/100"
    assert last_update("done\r") == "done" and last_update("plain") == "plain" and last_update("\r\r") == ""


def test_live_progress_bars_keep_their_rank_and_alike_bars_merge() -> None:
    from gpu_magics.spmd.kernel.view.output import progress_lines

    bar = " 45%|####5     | 45/100"
    live = {0: {"err": bar}, 1: {"err": bar}, 2: {"err": " 40%|####      | 40/100"}, 3: {"err": ""}}
    assert progress_lines(live) == [f"[0,1] {bar}", "[2]  40%|####      | 40/100"]
    assert progress_lines({0: {"err": ""}}) == []


def test_a_finished_bar_keeps_its_ranks_place_above_the_ranks_next_bar() -> None:
    from gpu_magics.spmd.kernel.view.output import progress_lines

    first = "100%|##########| 100/100 [00:01<00:00, 98.0it/s]"
    live = {0: {"err": " 10%|#         | 10/100"}, 1: {"err": " 95%|#########5| 95/100"}}
    assert progress_lines(live, {0: [first]}) == [
        f"[0] {first}",  # rank 0's first bar, finished, where it ran
        "[1]  95%|#########5| 95/100",
        "[0]  10%|#         | 10/100",  # rank 0's second bar
    ]
    assert progress_lines({0: {"err": ""}, 1: {}}, {0: [first], 1: [first]}) == [f"[0,1] {first}"]


def test_a_merged_line_keeps_each_ranks_own_order() -> None:
    """Rank 0 finishes its bar and prints "after" before rank 1 finishes its bar: the merged "after" shows after
    both bars."""
    merger = LineMerger([0, 1], hold=0.3)
    merger.add(0, [(0, "err", "bar 0 100%", 2.11), (1, "out", "after", 2.12)], now=2.2)
    merger.add(1, [(0, "err", "bar 1 100%", 2.29), (1, "out", "after", 2.30)], now=2.35)
    assert texts(merger.flush()) == ["[0] bar 0 100%", "[1] bar 1 100%", "[0,1] after"]


def test_ranks_a_little_apart_still_merge_their_alike_lines() -> None:
    """Without collectives the ranks run a few milliseconds apart: alike lines still show once."""
    merger = LineMerger([0, 1, 2], hold=0.3)
    for rank, offset in ((0, 0.0), (2, 0.001), (1, 0.002)):
        lines = [(0, "out", "epoch 1", 1 + offset), (1, "out", f"rank says {rank}", 1.00001 + offset)]
        merger.add(rank, [*lines, (2, "err", "careful", 1.00002 + offset)], now=1.01)
    shown = [(line.stream, line.text) for line in merger.flush()]
    assert shown[0] == ("out", "[0-2] epoch 1") and shown[-1] == ("err", "[0-2] careful")
    assert [text for _, text in shown[1:4]] == ["[0] rank says 0", "[2] rank says 2", "[1] rank says 1"]


def test_two_ranks_printing_two_lines_the_other_way_round_keep_their_orders() -> None:
    merger = LineMerger([0, 1], hold=0.3)
    merger.add(0, [(0, "out", "x", 1.0), (1, "out", "y", 1.1)], now=1.2)
    merger.add(1, [(0, "out", "y", 1.0), (1, "out", "x", 1.1)], now=1.2)
    assert texts(merger.flush()) == ["[0] x", "[0,1] y", "[1] x"]  # rank 0: x, y; rank 1: y, x


def test_cpu_ranks_tell_accelerate_to_use_gloo_as_its_cpu_launcher_does() -> None:
    made = World(order([Member("tcp://a:1", "w0", "a"), Member("tcp://a:2", "w1", "a")]), 1, 2)
    assert made.env(made.ranks[0])["ACCELERATE_USE_CPU"] == "true"
    gpu = World(order([Member("tcp://a:1", "w", "a", "GPU-a-0", "0", "H100")]), 1, 2)
    assert "ACCELERATE_USE_CPU" not in gpu.env(gpu.ranks[0])


def test_a_package_missing_on_the_ranks_is_named_with_its_pip_command() -> None:
    from gpu_magics.spmd.kernel.view.shown import missing_line, missing_module

    error = {"type": "ModuleNotFoundError", "message": "No module named 'lightning.fabric'"}
    assert missing_module(error) == "lightning.fabric"
    assert missing_module({"type": "ImportError", "message": "No module named 'x'"}) is None
    assert missing_line("lightning.fabric", "ranks 0-3") == (
        "lightning is not installed where ranks 0-3 run: pip install 'gpu-magics[spmd]' in the workers' "
        "environment (the ranks import there, not in this kernel)"
    )  # the command the install page gives for the SPMD libraries
    assert missing_line("x", "rank 1").startswith("x is not installed where rank 1 runs: pip install x")


def test_a_stalled_rank_names_the_collective_it_waits_in_and_the_ranks_that_never_entered_it() -> None:
    def answer(seq: int, pending: dict[str, object] | None = None, text: str = "idle") -> dict[str, object]:
        group: dict[str, object] = {"backend": "nccl", "seq": seq, "aborted": False}
        if pending:
            group["pending"] = pending
        return {"text": text, "collective": group}

    waiting = {"name": "all_reduce", "seq": 12}
    answers = {
        0: answer(12, waiting, "cell line 5, in item (_tensor.py:1)"),
        1: answer(11),
        2: answer(12),
        3: answer(11),
    }
    assert describe(0, answers) == "all_reduce #12 (NCCL) waits for ranks 1,3, which never entered it (cell line 5)"
    answers[1] = answers[3] = answer(12)
    assert describe(0, answers) == "waits in all_reduce #12 (NCCL), which every rank entered (cell line 5)"
    after = answer(12, waiting, "waiting for the GPU after the cell")
    assert describe(0, {0: after, 1: answer(11)}) == (
        "all_reduce #12 (NCCL) waits for rank 1, which never entered it (waiting for the GPU after the cell)"
    )
    guessed = {"name": "collective", "seq": 12, "guess": True}  # no flight recorder: the last one it entered
    assert describe(0, {0: answer(12, guessed, "waiting for the GPU after the cell"), 1: answer(11)}) == (
        "collective #12 (NCCL) waits for rank 1, which never entered it (waiting for the GPU after the cell)"
    )
    assert describe(0, {0: answer(12, guessed, "waiting for the GPU after the cell"), 1: answer(12)}) == (
        "waiting for the GPU after the cell"  # every rank entered as many: plain GPU work, no collective named
    )
    no_group = {0: {"text": "cell line 3, in waiting_here", "collective": None}, 1: answer(0)}
    assert describe(0, no_group) == "cell line 3, in waiting_here"  # no collective: where it is, as before


def test_gpu_ranks_named_by_uuid_get_nvmls_numbers_in_pci_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_magics.spmd.worker.rank_env import numbered_devices

    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    numbers = {"GPU-aa": 2, "GPU-bb": 0}
    env = {"GPU_MAGICS_SPMD_DEVICE": "gpu", "CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb"}
    assert numbered_devices(env, numbers.get) == {
        "GPU_MAGICS_SPMD_DEVICE": "gpu",
        "CUDA_VISIBLE_DEVICES": "2,0",  # the rank's own GPU stays first: LOCAL_RANK's order is kept
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
    unknown = {**env, "CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-cc"}
    assert numbered_devices(unknown, numbers.get) == unknown  # a GPU NVML does not know: the UUIDs stay
    mig = {**env, "CUDA_VISIBLE_DEVICES": "MIG-aa"}
    assert numbered_devices(mig, numbers.get) == mig
    chosen = {**env, "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}  # the user's order: numbers would not be NVML's
    assert numbered_devices(chosen, numbers.get) == chosen
    for unchanged in ({**env, "GPU_MAGICS_SPMD_DEVICE": "cpu"}, {**env, "CUDA_VISIBLE_DEVICES": "1,0"}):
        assert numbered_devices(unchanged, numbers.get) == unchanged


def test_a_rank_building_an_op_on_first_use_says_which_and_that_it_is_cached_afterwards() -> None:
    import sys
    from types import SimpleNamespace

    def frames_of(op_builder: bool) -> object:
        namespace: dict[str, object] = {"sys": sys}
        torch_side = "def _jit_compile(name):\n    return sys._getframe()\n"
        exec(compile(torch_side, "/site-packages/torch/utils/cpp_extension.py", "exec"), namespace)
        if not op_builder:
            return namespace["_jit_compile"]("my_ext")  # type: ignore[operator]
        deepspeed_side = "def jit_load(self):\n    return _jit_compile(self.name)\n"
        exec(compile(deepspeed_side, "/site-packages/deepspeed/ops/op_builder/builder.py", "exec"), namespace)
        return namespace["jit_load"](SimpleNamespace(name="fused_adam"))  # type: ignore[operator]

    assert building(frames_of(True)) == "building DeepSpeed's fused_adam op (first use, cached afterwards)"
    assert building(frames_of(False)) == "building the torch extension my_ext (first use, cached afterwards)"
    assert building(sys._getframe()) is None
