"""The files the partitions one plan decides at once in a process hold in all: a partition starts
once the largest listed so far fits, a page waits for room, the first partition in path order
never waits (so a plan always ends), and each plan counts its own."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

from checkpoint.cleanup.held import HeldFiles

PLAN = "/tmp/plan-a"


def _in_thread(held: HeldFiles, folder: str, pages: list[int], go: threading.Event, took: list[int],
               plan: str = PLAN) -> threading.Thread:  # fmt: skip
    def run() -> None:
        with held.deciding(plan, folder):
            took.append(0)  # started
            for n in pages:
                held.take(n)
                took.append(n)
            go.wait(30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _until(condition) -> None:
    for _ in range(3000):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("never came")


def test_a_partition_starts_alone_until_one_was_listed_then_as_the_largest_fits() -> None:
    held = HeldFiles(limit=10)
    ends = [threading.Event() for _ in range(3)]
    took: list[list[int]] = [[], [], []]
    first = _in_thread(held, "state/0/0", [4], ends[0], took[0])
    _until(lambda: took[0] == [0, 4])
    second = _in_thread(held, "state/0/1", [4], ends[1], took[1])
    second.join(0.3)
    assert took[1] == []  # nothing listed yet says how large a partition is: one at a time
    ends[0].set()
    first.join(30)
    _until(lambda: took[1] == [0, 4])  # 4 in hand, the largest 4: a third fits beside it
    third = _in_thread(held, "state/0/2", [4], ends[2], took[2])
    _until(lambda: took[2] == [0, 4])
    assert held.in_hand(PLAN) == 8
    for end in ends:
        end.set()
    second.join(30), third.join(30)
    assert held.in_hand(PLAN) == 0


def test_a_page_waits_until_the_first_partition_frees_what_it_holds() -> None:
    held = HeldFiles(limit=10)
    warm = threading.Event()
    warm.set()
    _in_thread(held, "state/0/00", [1], warm, []).join(30)  # the largest listed so far: 1 file
    first_ends, second_ends = threading.Event(), threading.Event()
    first = _in_thread(held, "state/0/10", [8], first_ends, [])
    _until(lambda: held.in_hand(PLAN) == 8)
    second_took: list[int] = []
    second = _in_thread(held, "state/0/11", [1, 5], second_ends, second_took)
    _until(lambda: second_took == [0, 1])  # one file fits beside the first's 8, five do not
    second.join(0.3)
    assert second_took == [0, 1] and held.in_hand(PLAN) == 9
    first_ends.set()  # it is decided: its 8 files go, and the second's page fits
    first.join(30)
    second_ends.set()
    second.join(30)
    assert not second.is_alive() and second_took == [0, 1, 5] and held.in_hand(PLAN) == 0


def test_the_first_partition_in_path_order_never_waits() -> None:
    """A partition larger than the limit, beside another that holds files: listed all the same."""
    held = HeldFiles(limit=10)
    later_ends, first_ends = threading.Event(), threading.Event()
    later = _in_thread(held, "state/0/9", [6], later_ends, [])
    _until(lambda: held.in_hand(PLAN) == 6)
    took: list[int] = []
    first = _in_thread(held, "state/0/10", [1000] * 3, first_ends, took)  # "state/0/10" < "state/0/9"
    _until(lambda: len(took) == 4)
    assert held.in_hand(PLAN) == 3006
    first_ends.set(), later_ends.set()
    first.join(30), later.join(30)
    assert held.in_hand(PLAN) == 0


def test_each_plan_counts_its_own() -> None:
    """Two plans of one process (`ckpt fleet --plan`) with the same partition folder: one stalled
    with its files in hand holds up neither the other's count nor its pages."""
    held = HeldFiles(limit=10)
    stalled = threading.Event()
    _in_thread(held, "state/0/0", [9], stalled, [], plan="/tmp/plan-a")
    _until(lambda: held.in_hand("/tmp/plan-a") == 9)
    other_ends = threading.Event()
    took: list[int] = []
    other = _in_thread(held, "state/0/0", [9, 1], other_ends, took, plan="/tmp/plan-b")
    _until(lambda: took == [0, 9, 1])
    other_ends.set()
    other.join(30)
    assert held.in_hand("/tmp/plan-b") == 0 and held.in_hand("/tmp/plan-a") == 9
    stalled.set()


def test_many_partitions_at_once_hold_the_limit_and_one_more_and_all_end() -> None:
    held, limit = HeldFiles(limit=50), 50
    rng = random.Random(7)
    folders = {f"state/0/{i:03d}": [rng.randint(1, 30) for _ in range(rng.randint(1, 6))] for i in range(60)}
    worst: list[int] = []
    lock = threading.Lock()

    def decide(folder: str) -> None:
        with held.deciding(PLAN, folder):
            for n in folders[folder]:
                held.take(n)
                with lock:
                    worst.append(held.in_hand(PLAN))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(decide, folders, timeout=60))
    largest = max(sum(pages) for pages in folders.values())
    assert max(worst) <= limit + largest and held.in_hand(PLAN) == 0
    assert max(worst) > limit // 2  # they did run side by side
    held.forget(PLAN)
    assert not held._held and not held._largest
