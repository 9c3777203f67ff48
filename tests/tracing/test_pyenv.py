"""Libraries see a compiler (tracing/pyenv.py): is_compiling, isinstance and str of symbolic ints."""
import threading

import torch

import dynashape as ds


def test_is_compiling_is_true_while_tracing_and_false_outside():
    seen = []

    def f(x):
        seen.append(torch.compiler.is_compiling())
        return x + 1

    cf = ds.compile(f)
    cf(torch.ones(2))
    assert seen == [True] and torch.compiler.is_compiling() is False
    assert not hasattr(torch.compiler.is_compiling, "_dynashape")  # the patch is gone after the trace


def test_is_compiling_is_false_in_other_threads_during_a_trace():
    other = []

    def f(x):
        t = threading.Thread(target=lambda: other.append(torch.compiler.is_compiling()))
        t.start()
        t.join()
        return x + 1

    ds.compile(f)(torch.ones(2))
    assert other == [False]


def last_logits(h, logits_to_keep: int = 0):  # transformers' slice_logits_to_keep, reduced
    s = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
    return h[:, s, :]


def test_isinstance_of_a_symbolic_int_argument_takes_eagers_branch():
    cf = ds.compile(last_logits, dynamic=True)
    for k in (0, 2, 3):
        h = torch.randn(2, 7, 4)
        assert torch.equal(cf(h, k), last_logits(h, k))


def test_str_and_format_of_a_symbolic_size_give_the_number():
    def f(x):
        return x * len(f"{x.shape[0]}") + int(str(x.shape[0])) + float(format(x.size(0), "d"))

    cf = ds.compile(f, dynamic=True)
    for n in (3, 4, 12):
        x = torch.ones(n)
        assert torch.equal(cf(x), f(x))


def test_type_of_a_symbolic_int_stays_symint():
    kinds = []

    def f(x):
        kinds.append(type(x.shape[0]) is int)
        return x

    ds.compile(f, dynamic=True)(torch.ones(3))
    assert kinds == [False]  # documented: isinstance(n, int) is True, type(n) is int is not
