"""Which rank gets which chunk of a persisted dask array, without a cluster: chunks stay where their worker holds
them, uneven shares are evened out by moving the fewest bytes, copies the receiving worker holds move for free."""

from __future__ import annotations

from gpu_magics.spmd.kernel.data.chunk_plan import plan

A, B, C = "tcp://a:1", "tcp://b:1", "tcp://c:1"
MB = 1_000_000


def test_chunks_spread_evenly_stay_with_the_worker_that_holds_them() -> None:
    holders = [{A}, {B}, {B}, {A}]
    made = plan([MB] * 4, holders, [A, B])
    assert made.owners == (0, 1, 1, 0) and made.moves == () and made.moved_bytes == 0
    assert made.counts() == (2, 2)


def test_chunks_all_on_one_worker_are_halved_by_moving_half_of_them() -> None:
    made = plan([MB] * 8, [{A}] * 8, [A, B])
    assert made.counts() == (4, 4)
    assert len(made.moves) == 4 and made.moved_bytes == 4 * MB
    assert all(move.source == A and move.target == B for move in made.moves)
    assert {move.index for move in made.moves} == {index for index, owner in enumerate(made.owners) if owner == 1}


def test_three_ranks_end_at_most_one_chunk_apart_with_the_fewest_moves() -> None:
    made = plan([MB] * 7, [{A}] * 6 + [{B}], [A, B, C])
    assert sorted(made.counts()) == [2, 2, 3]
    # ranks hold 6, 1 and 0: the fewest moves is 3 (to 3, 2 and 2), all from A
    assert made.counts() == (3, 2, 2) and len(made.moves) == 3 and made.moved_bytes == 3 * MB
    assert {move.source for move in made.moves} == {A}


def test_an_odd_chunk_that_would_not_even_things_out_stays() -> None:
    made = plan([3 * MB, MB], [{A}, {A}], [A, B])
    assert made.owners == (0, 1) and made.moved_bytes == MB  # the small one moves, the large one stays
    assert plan([MB], [{A}], [A, B]).moves == ()  # one chunk: moving it would make nothing more even


def test_a_replica_on_the_emptier_worker_moves_the_chunk_for_free() -> None:
    made = plan([MB] * 4, [{A}, {A}, {A, B}, {A, B}], [A, B])
    assert made.counts() == (2, 2) and made.moves == ()  # the replicated chunks go to B without a byte moved
    made = plan([MB] * 4, [{A}, {A}, {A}, {A, B}], [A, B])
    assert made.counts() == (2, 2) and len(made.moves) == 1 and made.moved_bytes == MB


def test_chunks_of_a_worker_without_a_rank_go_to_the_ranks_and_count_as_moved() -> None:
    made = plan([MB] * 4, [{C}] * 4, [A, B])  # pushed to the ranks of A and B only
    assert made.counts() == (2, 2) and made.moved_bytes == 4 * MB
    assert all(move.source == C for move in made.moves)


def test_empty_chunks_never_move() -> None:
    made = plan([0, 0, 0], [{A}] * 3, [A, B])
    assert made.moves == () and made.loads == (0, 0)
