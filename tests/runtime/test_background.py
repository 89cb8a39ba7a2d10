"""The daemon threads that run einc's work off a call's path (``runtime/background.py``):
jobs start in order, at most ``threads`` at once; ``settle`` waits for them all."""

import threading
import time

from einc.runtime.background import Worker


def test_two_threads_run_two_jobs_at_once_and_settle_waits_for_both():
    worker, barrier, done = Worker("test-two", threads=2), threading.Barrier(2, timeout=30), []

    def job(i):
        barrier.wait()              # passes only if the other job runs at the same time
        time.sleep(0.05)
        done.append(i)
    for i in range(2):
        worker.submit(lambda i=i: job(i))
    assert worker.settle(30)
    assert sorted(done) == [0, 1] and not barrier.broken


def test_one_thread_runs_jobs_one_at_a_time_in_order():
    worker, running, seen, order = Worker("test-one"), [], [], []
    lock = threading.Lock()

    def job(i):
        with lock:
            running.append(i)
            seen.append(len(running))
        time.sleep(0.01)
        with lock:
            running.remove(i)
            order.append(i)
    for i in range(5):
        worker.submit(lambda i=i: job(i))
    assert worker.settle(30)
    assert order == list(range(5)) and max(seen) == 1


def test_the_thread_count_is_read_at_each_submit_and_jobs_start_in_order():
    wanted, started, gate = [1], [], threading.Event()
    worker = Worker("test-count", threads=lambda: wanted[0])

    def job(i):
        started.append(i)
        gate.wait(30)
    worker.submit(lambda: job(0))
    worker.submit(lambda: job(1))
    time.sleep(0.2)
    assert started == [0]           # one thread: the second job waits
    wanted[0] = 3
    worker.submit(lambda: job(2))   # a second thread starts and takes the oldest job
    deadline = time.time() + 30
    while len(started) < 2 and time.time() < deadline:
        time.sleep(0.01)
    assert started[:2] == [0, 1]
    gate.set()
    assert worker.settle(30) and sorted(started) == [0, 1, 2]


def test_a_failing_job_leaves_the_thread_running_the_next():
    worker, done = Worker("test-fail", threads=2), []
    worker.submit(lambda: 1 / 0)
    worker.submit(lambda: done.append(1))
    assert worker.settle(30) and done == [1]


def test_a_later_job_waits_behind_every_other_queued():
    worker, order, gate = Worker("test-later"), [], threading.Event()
    worker.submit(lambda: (gate.wait(30), order.append("first")))
    worker.submit(lambda: order.append("plain"), later=True)
    worker.submit(lambda: order.append("second"))
    worker.submit(lambda: order.append("third"))   # queued after it, started before it
    gate.set()
    assert worker.settle(30)
    assert order == ["first", "second", "third", "plain"]
