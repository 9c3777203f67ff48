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


def test_type_in_user_code_answers_as_at_run_time():
    # was False for a symbolic int, and `type(x) is torch.Tensor` False for a traced tensor: the
    # trace took the other branch of eager's, silently
    kinds = []

    def f(x, n, w):
        kinds.append((type(x.shape[0]) is int, type(n) is int, type(x) is torch.Tensor,
                      type(w) is torch.nn.Parameter, type(x * 2) is torch.Tensor))
        a = x * 2 if type(n) is int else x * 3
        return a + 1 if type(w) is torch.nn.Parameter else a + 2

    w = torch.nn.Parameter(torch.ones(3))
    cf = ds.compile(f, dynamic=True)
    for n in (3, 4):
        x = torch.randn(n)
        torch.testing.assert_close(cf(x, n, w), f(x, n, w))
    assert kinds[0] == (True,) * 5 and all(k == kinds[0] for k in kinds)
    assert isinstance(int, type) and type("K", (), {}).__name__ == "K"  # the builtin is back after the trace
