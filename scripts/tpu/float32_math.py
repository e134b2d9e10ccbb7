"""How far the platform's float32 elementwise math is from the correctly rounded result, in
ulps, per function: JAX on the default device against float64 NumPy rounded to float32.

Why: tests compare lazyxla on the chip with eager PyTorch on CPU (correctly rounded within an
ulp or two); where the chip's functions err more, the tests' tolerance there
(tests/helpers.py `float32_math_tolerance`) must say so, and a gradient that differs more
than these errors explain is lazyxla's to find. Run on the TPU machine after
`. scripts/tpu/setup.sh`:  python3 scripts/tpu/float32_math.py [inputs per function]
(2**20 by default, about 20 s; runs on CPU too). Last, the products lazyxla asks for under
autocast (float16 and bfloat16 operands, float32 accumulation, precision "highest"), in ulps
of their own dtype: one float16 `linear` element was 8 float16 ulps off on the chip.
"""
from __future__ import annotations

import math
import sys

import jax
import jax.numpy as jnp
import numpy as np


# name: (JAX function, float64 NumPy reference, input range)
FUNCTIONS = {
    "tanh": (jnp.tanh, np.tanh, (-12.0, 12.0)),
    "tanh (|x| < 1)": (jnp.tanh, np.tanh, (-1.0, 1.0)),
    "exp": (jnp.exp, np.exp, (-80.0, 80.0)),
    "log": (jnp.log, np.log, (1e-30, 1e30)),
    "log1p": (jnp.log1p, np.log1p, (-0.5, 10.0)),
    "sigmoid": (jax.nn.sigmoid, lambda x: 1.0 / (1.0 + np.exp(-x)), (-30.0, 30.0)),
    "sqrt": (jnp.sqrt, np.sqrt, (0.0, 1e6)),
    "rsqrt": (jax.lax.rsqrt, lambda x: 1.0 / np.sqrt(x), (1e-6, 1e6)),
    "1 / x": (lambda x: 1.0 / x, lambda x: 1.0 / x, (0.1, 1e4)),
    "erf": (jax.scipy.special.erf, np.vectorize(math.erf), (-4.0, 4.0)),
}


def ulps(got: np.ndarray, want64: np.ndarray) -> np.ndarray:
    """|got - want| in units of the float32 spacing at the correctly rounded result."""
    want = want64.astype(np.float32)
    spacing = np.spacing(np.abs(want)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want64) / spacing


def main(n: int) -> None:
    rng = np.random.default_rng(0)
    print(f"device: {jax.devices()[0].device_kind}, JAX {jax.__version__}, {n} inputs per function")
    print(f"{'function':<16} {'max ulp':>10} {'p99.9 ulp':>10} {'mean ulp':>9}  worst input")
    for name, (fn, ref, (lo, hi)) in FUNCTIONS.items():
        if name == "log":
            x = np.exp(rng.uniform(np.log(lo), np.log(hi), n)).astype(np.float32)
        else:
            x = rng.uniform(lo, hi, n).astype(np.float32)
        got = np.asarray(jax.jit(fn)(jnp.asarray(x)))
        err = ulps(got, ref(x.astype(np.float64)))
        err = np.where(np.isfinite(err), err, 0.0)
        worst = int(np.argmax(err))
        print(f"{name:<16} {err.max():>10.1f} {np.quantile(err, 0.999):>10.2f} {err.mean():>9.3f}  "
              f"x = {x[worst]:.7g}: got {got[worst]:.9g}")
    products(rng)


def products(rng) -> None:
    """Max error of a 256x256 product in `dtype` operands, accumulated in float32 at
    "highest" and rounded to `dtype` (lower/linalg.py `_mm`), in units of `dtype`'s epsilon
    times the result (about an ulp)."""
    for dtype in (jnp.float16, jnp.bfloat16):
        a, b = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
        a, b = (np.asarray(jnp.asarray(v, dtype).astype(jnp.float32)) for v in (a, b))
        matmul = jax.jit(lambda x, y: jnp.matmul(x, y, precision="highest",
                                                 preferred_element_type=jnp.float32).astype(dtype))
        got = np.asarray(matmul(jnp.asarray(a, dtype), jnp.asarray(b, dtype)).astype(jnp.float32), np.float64)
        want = a.astype(np.float64) @ b.astype(np.float64)
        # eps times the result (at least 1: entries near 0 are sums that cancel), about an ulp
        spacing = np.maximum(np.abs(want), 1.0) * float(jnp.finfo(dtype).eps)
        err = np.abs(got - want) / spacing
        print(f"{jnp.dtype(dtype).name + ' matmul':<16} {err.max():>10.1f} {np.quantile(err, 0.999):>10.2f} "
              f"{err.mean():>9.3f}  (256x256, float32 accumulation at highest)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20)
