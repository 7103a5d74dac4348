"""irsurgeon.core.concurrency.alongside: the work beside the block is always joined, the block's error comes first, the
work's lines are said in order only when the block succeeded."""
from __future__ import annotations

import threading
import time

import pytest

from irsurgeon.core.concurrency import alongside


def test_the_works_lines_and_value_come_after_the_block_in_order():
    said, order = [], []

    def work(say):
        for i in range(3):
            say(f"line {i}")
        order.append("work")
        return 42

    with alongside(work) as other:
        order.append("block")
    assert other.result(said.append) == 42 and said == ["line 0", "line 1", "line 2"]


def test_a_failing_block_waits_for_the_work_and_its_error_comes_first():
    finished = threading.Event()

    def work(say):
        time.sleep(0.2)
        say("annotated")
        finished.set()
        raise RuntimeError("the work failed too")

    with pytest.raises(KeyboardInterrupt):
        with alongside(work):
            raise KeyboardInterrupt
    assert finished.is_set()  # joined before the interruption went on: nothing writes after the caller cleans up


def test_the_works_error_is_raised_by_result_with_its_lines_said_first():
    said = []

    def work(say):
        say("planned")
        raise ValueError("bad annotation")

    with alongside(work) as other:
        pass
    with pytest.raises(ValueError, match="bad annotation"):
        other.result(said.append)
    assert said == ["planned"]
