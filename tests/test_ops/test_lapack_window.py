"""SciPy's BLAS runs on one thread while any split LAPACK work runs, whichever
threads enter and leave the window, and gets its count back after."""
import threading

from mmsoft.ops.fast import lapack


def blas_count():
    (get, _), = lapack._scipy_blas()  # SciPy's wheels carry one OpenBLAS
    return get()


def test_the_window_nests_across_threads_and_restores_the_count():
    assert lapack.available(), lapack.unavailable_reason()  # SciPy is in the stack
    before = blas_count()
    assert before > 1  # else the window would change nothing
    inside, entered, leave = [], threading.Barrier(2), threading.Event()

    def hold():
        with lapack.single_threaded():
            entered.wait()
            leave.wait()
            inside.append(blas_count())

    holder = threading.Thread(target=hold)
    holder.start()
    with lapack.single_threaded():
        entered.wait()
        assert blas_count() == 1
    assert blas_count() == 1  # the other thread is still inside
    leave.set()
    holder.join()
    assert inside == [1] and blas_count() == before


def test_the_window_works_from_any_thread():
    # A window opened from one thread first (the route's measurement runs on
    # a worker) must not stop another thread's window from taking effect.
    before = blas_count()

    def work(seen):
        with lapack.single_threaded():
            seen.append(blas_count())

    for _ in range(2):
        seen = []
        worker = threading.Thread(target=work, args=(seen,))
        worker.start()
        worker.join()
        with lapack.single_threaded():
            seen.append(blas_count())
        assert seen == [1, 1] and blas_count() == before
