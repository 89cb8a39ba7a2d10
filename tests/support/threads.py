"""A test's work run on several threads at once, its exceptions brought back to the test."""

import threading


def errors_in_threads(work, args) -> list[BaseException]:
    """Runs ``work(a)`` for each ``a`` of ``args``, each on a thread of its own, all started
    before any is joined: the exceptions they raised (a failed assertion among them), which
    a thread's own traceback would not fail the test with."""
    errors = []

    def guarded(a):
        try:
            work(a)
        except Exception as e:      # noqa: BLE001 - returned to the test
            errors.append(e)
    threads = [threading.Thread(target=guarded, args=(a,)) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
