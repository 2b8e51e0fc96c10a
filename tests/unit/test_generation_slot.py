"""The one generation slot: long work holds it a piece at a time and lets short requests go between its pieces, a
waiter is told what it waits for and for about how long, and a run through the runner says so while it waits."""

from __future__ import annotations

import threading
import time

import pytest

from playground import generation_slot, runner
from playground.events import DoneEvent, ProgressEvent
from playground.generation_slot import GenerationSlot, Holder, about, held_pieces
from playground.spec import RunSpec
from tests.helpers import allowed_tiny_model

PIECE_S = 0.15  # one piece of the fake long work


@pytest.fixture(autouse=True)
def short_quiet(monkeypatch):
    monkeypatch.setattr(generation_slot, "QUIET_S", 0.05)


def _long_work(slot: GenerationSlot, holder: Holder, pieces: int, done: list[int]) -> threading.Thread:
    """A measure of `pieces` chunks, each computed under the slot; `done` counts the chunks finished."""
    def chunks():
        for _ in range(pieces):
            time.sleep(PIECE_S)
            yield 1

    def work() -> None:
        for _ in held_pieces(chunks(), slot, holder):
            done[0] += 1

    thread = threading.Thread(target=work)
    thread.start()
    return thread


def test_a_short_request_beside_long_work_waits_at_most_the_piece_in_progress():
    slot, done = GenerationSlot(), [0]
    long = _long_work(slot, Holder("a Long context run", owner="tab-a", yields=True), 6, done)
    while done[0] < 2:
        time.sleep(0.01)
    arrived = done[0]
    with slot.hold(Holder("a Step", owner="tab-b")):
        pieces_waited = done[0] - arrived
        time.sleep(PIECE_S)  # the short request's own run: long work makes no progress meanwhile
        assert done[0] - arrived == pieces_waited
    long.join()
    assert pieces_waited <= 1 and done[0] == 6  # the long work then went on to its end


def test_short_requests_go_before_long_works_next_piece_in_arrival_order():
    slot, order = GenerationSlot(), []
    slot.acquire(Holder("a context measure", yields=True))

    def take(holder: Holder) -> None:
        with slot.hold(holder):
            order.append(holder.what)

    threads = []
    for holder in (Holder("the next chunk", yields=True), Holder("a Step"), Holder("an API completion")):
        threads.append(threading.Thread(target=take, args=(holder,)))
        threads[-1].start()
        time.sleep(0.05)  # in this order
    slot.release()
    for thread in threads:
        thread.join(5)
    assert order == ["a Step", "an API completion", "the next chunk"]


def test_a_waiter_is_told_what_it_waits_for_and_for_about_how_long():
    slot = GenerationSlot()
    measure = Holder("a Long context run", owner="tab-a", yields=True)
    measure.pieces_s.append(40.0)  # its last piece took 40 s
    slot.acquire(measure)
    try:
        assert slot.waiting_words(Holder("a Step", owner="tab-b")) == ("waiting for a Long context run in another "
                                                                       "tab: about 40 s")
        mine = slot.waiting_words(Holder("a run", owner="tab-a"))
        assert mine.startswith("waiting for a Long context run in this tab")
        assert slot.waiting_words(Holder(owner=generation_slot.API_OWNER)).endswith("in another tab: about 40 s")
        assert 39 < slot.wait_s(Holder()) <= 40
    finally:
        slot.release()
    untimed = Holder("a sweep", yields=True)
    with slot.hold(untimed):  # nothing of it has been timed yet: no estimate, only how long it has run
        assert slot.wait_s(Holder()) is None
        assert slot.waiting_words(Holder()) == "waiting for a sweep (running for 0 s)"
    assert about(95) == "about 95 s" and about(400) == "about 7 min"


def test_a_run_waiting_for_the_slot_says_for_what_then_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(generation_slot, "TICK_S", 0.05)
    measure = Holder("a Long context run", owner="tab-a", yields=True)
    measure.pieces_s.append(30.0)
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as model:
        events = runner.run("abc", RunSpec(model=model, max_new_tokens=2), judged=False,
                            holder=Holder("a Step", owner="tab-b"))
        runner.GENERATION_LOCK.acquire(measure)
        try:
            said = next(e for e in events if isinstance(e, ProgressEvent) and e.message.startswith("waiting for"))
        finally:
            runner.GENERATION_LOCK.release()
        rest = list(events)
    assert said.message.startswith("waiting for a Long context run in another tab: about ")
    assert isinstance(rest[-1], DoneEvent) and rest[-1].result["new_tokens"] == 2


def test_the_context_measures_give_the_slot_up_between_their_chunks_and_runs(tmp_path, monkeypatch):
    """Between two pieces (where each reports its progress) nobody holds the slot: a short request goes there."""
    from playground.context import speed as context_speed
    from playground.context.quality import measure_quality
    from playground.models.loaded import LOADED

    monkeypatch.setattr(context_speed, "sample_bandwidth", lambda: [10.0])  # no 1 GiB probe in the fast lane
    held_between: list[bool] = []

    def progress(message: str) -> None:
        held_between.append(runner.GENERATION_LOCK.locked())

    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as model:
        loaded, _ = LOADED.get(model, "fp32")
        measure_quality(loaded, RunSpec(model=model, cache="sliding", window=16), list(range(1, 65)), progress,
                        chunk=8)
        context_speed.measure_speed(loaded, RunSpec(model=model), list(range(1, 65)), [16, 32], progress)
    assert len(held_between) > 8 and not any(held_between)


def test_a_stop_while_waiting_gives_up_the_wait_and_nothing_runs(tmp_path, monkeypatch):
    """Stop pressed while the run waits behind long work: it ends within a tick, before the slot is free."""
    monkeypatch.setattr(generation_slot, "TICK_S", 0.05)
    measure = Holder("a Long context run", owner="tab-a", yields=True)
    stop = threading.Event()
    with allowed_tiny_model(monkeypatch, tmp_path / "tiny") as model:
        events = runner.run("abc", RunSpec(model=model, max_new_tokens=2), should_stop=stop.is_set,
                            holder=Holder("a Compare run", owner="tab-b"))
        runner.GENERATION_LOCK.acquire(measure)
        try:
            next(e for e in events if isinstance(e, ProgressEvent) and e.message.startswith("waiting for"))
            stop.set()
            done = next(e for e in events if isinstance(e, DoneEvent))
            assert runner.GENERATION_LOCK.locked()  # it ended while the long work still held the slot
        finally:
            runner.GENERATION_LOCK.release()
    result = done.result
    assert result["stopped"] and result["new_tokens"] == 0 and result["extra"]["stopped_while_waiting"]
    from playground.ui.run import done_notice, stopped_how

    assert done_notice(result) == "■ stopped while waiting for the generation slot: nothing ran"
    assert stopped_how(result) == "while waiting for the generation slot"
    slot = GenerationSlot()
    with slot.hold(Holder()), slot.hold(Holder(), given_up=lambda: True) as held:
        assert held is False  # gave up at once: the slot was held, and is still held by the first
