"""torch.fft on the lazyxla device, value by value against eager CPU: every function
with `n`/`s`, `dim` and `norm` over several shapes, both precisions, gradients, the
helpers (fftshift, fftfreq) and stft/istft. All of it traced: the three ATen
primitives (_fft_c2c, _fft_r2c, _fft_c2r) never run on the host."""
import pytest
import torch

from helpers import assert_close, assert_no_fallback, check_op, host_fallbacks, skip_if_narrowed

F = torch.fft
NORMS = [None, "forward", "ortho", "backward"]
# The full grids run in the slow suite; by default every norm is still covered by
# test_double_precision ("backward" is None's mode, "forward" scales as "ortho" does).
GRID_NORMS = [None, "ortho", pytest.param("forward", marks=pytest.mark.slow),
              pytest.param("backward", marks=pytest.mark.slow)]
PRIMS = ("_fft_c2c", "_fft_r2c", "_fft_c2r")


def signal(*shape, dtype=torch.complex64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=dtype)


def tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype in (torch.complex64, torch.float32) else dict(rtol=1e-9, atol=1e-9)


# complex-input and real-input one-dimensional transforms
ONE_D_COMPLEX = [F.fft, F.ifft, F.irfft, F.hfft]
ONE_D_REAL = [F.rfft, F.ihfft, F.fft, F.ifft]


@pytest.mark.parametrize("norm", GRID_NORMS)
@pytest.mark.parametrize("dim, n", [(-1, None), (0, None), (1, 3), (-1, 9), (0, 1)])
@pytest.mark.parametrize("fn", ONE_D_COMPLEX + ONE_D_REAL, ids=lambda f: getattr(f, "__name__", ""))
def test_one_dimensional(fn, dim, n, norm):
    x = signal(4, 6, 5, dtype=torch.complex64 if fn in ONE_D_COMPLEX else torch.float32)
    check_op(lambda t: fn(t, n=n, dim=dim, norm=norm), x, **tol(x.dtype))
    assert_no_fallback(*PRIMS)


ND = [(F.fft2, True), (F.ifft2, True), (F.rfft2, False), (F.irfft2, True), (F.hfft2, True), (F.ihfft2, False),
      (F.fftn, True), (F.ifftn, True), (F.rfftn, False), (F.irfftn, True), (F.hfftn, True), (F.ihfftn, False)]


@pytest.mark.parametrize("norm", GRID_NORMS)
@pytest.mark.parametrize("kwargs", [{}, {"dim": (0, 2)}, {"s": (3, 7), "dim": (2, 0)}, {"s": (4, 4)}],
                         ids=["default", "dims", "s_unordered", "s"])
@pytest.mark.parametrize("fn, complex_in", ND, ids=[f.__name__ for f, _ in ND])
def test_multi_dimensional(fn, complex_in, kwargs, norm):
    x = signal(4, 6, 5, dtype=torch.complex64 if complex_in else torch.float32)
    check_op(lambda t: fn(t, norm=norm, **kwargs), x, **tol(x.dtype))
    assert_no_fallback(*PRIMS)


@pytest.mark.parametrize("fn, complex_in", [(F.fft, True), (F.rfft, False), (F.irfft, True), (F.fftn, True),
                                            (F.rfftn, False), (F.irfftn, True), (F.hfft, True), (F.ihfft, False)],
                         ids=lambda v: getattr(v, "__name__", ""))
def test_double_precision(fn, complex_in):
    skip_if_narrowed(torch.float64, torch.complex128)
    x = signal(3, 8, dtype=torch.complex128 if complex_in else torch.float64)
    for norm in NORMS:
        check_op(lambda t: fn(t, norm=norm), x, **tol(x.dtype))


@pytest.mark.parametrize("shape", [(16,), (1, 7), (2, 3, 4, 5)])
def test_shapes_including_more_than_three_transformed_dims(shape):
    z = signal(*shape)
    check_op(F.fftn, z, **tol(z.dtype))
    check_op(F.ifftn, z, **tol(z.dtype))
    check_op(F.rfftn, z.real, **tol(z.dtype))
    check_op(lambda t: F.irfftn(t, s=shape), z, **tol(z.dtype))


def test_integer_inputs_promote_as_eager():
    check_op(F.fft, torch.arange(8), **tol(torch.float32))
    skip_if_narrowed(torch.float64)
    check_op(F.rfft, torch.arange(8).double(), **tol(torch.float64))


@pytest.mark.parametrize("fn, complex_in", [(F.fft, True), (F.ifft, True), (F.rfft, False), (F.irfft, True),
                                            (F.hfft, True), (F.ihfft, False), (F.fft2, True), (F.rfftn, False),
                                            (F.irfftn, True)], ids=lambda v: getattr(v, "__name__", ""))
@pytest.mark.parametrize("norm", ["backward", "ortho"])
def test_gradients(fn, complex_in, norm):
    x = signal(4, 6, dtype=torch.complex64 if complex_in else torch.float32).requires_grad_()
    check_op(lambda t: fn(t, norm=norm), x, rtol=1e-4, atol=1e-4)


def test_backward_of_abs_squared_spectrum(dev):
    z = signal(10).requires_grad_()
    d = z.detach().to(dev).requires_grad_()
    for t in (z, d):
        (F.fft(t).abs() ** 2).sum().backward()
    assert_close(d.grad, z.grad, rtol=1e-4, atol=1e-4)
    assert host_fallbacks() == []


def test_shift_and_frequencies(dev):
    z = signal(5, 8)
    check_op(lambda t: F.fftshift(F.fft(t)), z, **tol(z.dtype))
    check_op(lambda t: F.ifftshift(t, dim=0), z)
    check_op(lambda t: F.fftshift(t, dim=(0, 1)), z)
    for n, d in ((7, 1.0), (8, 0.5)):
        assert_close(F.fftfreq(n, d, device=dev), F.fftfreq(n, d))
        assert_close(F.rfftfreq(n, d, device=dev), F.rfftfreq(n, d))
        assert_close(F.fftfreq(n, dtype=torch.float64, device=dev), F.fftfreq(n, dtype=torch.float64))


STFT = [
    dict(n_fft=16, window="hann"),
    dict(n_fft=16, hop_length=4, window="hann", normalized=True),
    dict(n_fft=12, hop_length=3, win_length=8, window="hamming", center=False),
    dict(n_fft=16, window="ones", onesided=False),
    dict(n_fft=16, window="hann", pad_mode="constant"),
]


def _window(spec, dev):
    n = spec.get("win_length", spec["n_fft"])
    w = {"hann": torch.hann_window, "hamming": torch.hamming_window, "ones": torch.ones}[spec["window"]](n)
    return dict(spec, window=w if dev is None else w.to(dev))


@pytest.mark.parametrize("spec", STFT, ids=range(len(STFT)))
def test_stft_and_istft(dev, spec):
    x = signal(2, 100, dtype=torch.float32)
    cpu_kw, dev_kw = _window(spec, None), _window(spec, dev)
    expected = torch.stft(x, return_complex=True, **cpu_kw)
    actual = torch.stft(x.to(dev), return_complex=True, **dev_kw)
    assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    assert_no_fallback(*PRIMS, "as_strided")
    drop = ("pad_mode",)
    inverse = dict(length=100, **{k: v for k, v in cpu_kw.items() if k not in drop})
    inverse_dev = dict(length=100, **{k: v for k, v in dev_kw.items() if k not in drop})
    if not spec.get("center", True):   # eager's NOLA check refuses this window: so must lazyxla
        for z, kw in ((expected, inverse), (actual, inverse_dev)):
            with pytest.raises(RuntimeError, match="window overlap add min"):
                torch.istft(z, **kw)
        return
    assert_close(torch.istft(actual, **inverse_dev), torch.istft(expected, **inverse), rtol=1e-4, atol=1e-4)


def test_stft_of_a_complex_signal_and_its_gradient():
    z = signal(64).requires_grad_()
    w = torch.hann_window(16)
    check_op(lambda t, win: torch.stft(t, 16, hop_length=4, window=win, return_complex=True), z, w,
             rtol=1e-4, atol=1e-4)
