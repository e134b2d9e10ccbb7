"""Modified Bessel functions I0, I1, K0, K1 and exponentially scaled K0, K1, and the
Airy function Ai: eager's Cephes algorithms (aten/src/ATen/native/Math.h) step by
step in the input's dtype (float32 for integer inputs).

I0 and I1 are jax.scipy.special's (Cephes' Chebyshev series as eager's; they agree
with eager's within float rounding over the whole range, checked down to 1e-8 and up
to overflow); K0, K1 (scaled or not) and Ai have no JAX counterpart and are ported:
K's Chebyshev series on (0, 2] and (2, inf), Ai's power series near 0 (a loop until
the term is below the dtype's epsilon, as eager's) and its asymptotic rational forms
beyond +-2.09.
"""
from __future__ import annotations

import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np
import torch
from jax import lax

from ._series import chbevl, polevl
from ._util import exact_div
from .registry import register
from .special_math import float_unary

aten = torch.ops.aten

_K0_A = (
    1.37446543561352307156e-16, 4.25981614279661018399e-14, 1.03496952576338420167e-11,
    1.90451637722020886025e-09, 2.53479107902614945675e-07, 2.28621210311945178607e-05,
    1.26461541144692592338e-03, 3.59799365153615016266e-02, 3.44289899924628486886e-01,
    -5.35327393233902768720e-01,
)
_K0_B = (
    5.30043377268626276149e-18, -1.64758043015242134646e-17, 5.21039150503902756861e-17,
    -1.67823109680541210385e-16, 5.51205597852431940784e-16, -1.84859337734377901440e-15,
    6.34007647740507060557e-15, -2.22751332699166985548e-14, 8.03289077536357521100e-14,
    -2.98009692317273043925e-13, 1.14034058820847496303e-12, -4.51459788337394416547e-12,
    1.85594911495471785253e-11, -7.95748924447710747776e-11, 3.57739728140030116597e-10,
    -1.69753450938905987466e-09, 8.57403401741422608519e-09, -4.66048989768794782956e-08,
    2.76681363944501510342e-07, -1.83175552271911948767e-06, 1.39498137188764993662e-05,
    -1.28495495816278026384e-04, 1.56988388573005337491e-03, -3.14481013119645005427e-02,
    2.44030308206595545468e+00,
)
_K1_A = (
    -7.02386347938628759343e-18, -2.42744985051936593393e-15, -6.66690169419932900609e-13,
    -1.41148839263352776110e-10, -2.21338763073472585583e-08, -2.43340614156596823496e-06,
    -1.73028895751305206302e-04, -6.97572385963986435018e-03, -1.22611180822657148235e-01,
    -3.53155960776544875667e-01, 1.52530022733894777053e+00,
)
_K1_B = (
    -5.75674448366501715755e-18, 1.79405087314755922667e-17, -5.68946255844285935196e-17,
    1.83809354436663880070e-16, -6.05704724837331885336e-16, 2.03870316562433424052e-15,
    -7.01983709041831346144e-15, 2.47715442448130437068e-14, -8.97670518232499435011e-14,
    3.34841966607842919884e-13, -1.28917396095102890680e-12, 5.13963967348173025100e-12,
    -2.12996783842756842877e-11, 9.21831518760500529508e-11, -4.19035475934189648750e-10,
    2.01504975519703286596e-09, -1.03457624656780970260e-08, 5.74108412545004946722e-08,
    -3.50196060308781257119e-07, 2.40648494783721712015e-06, -1.93619797416608296024e-05,
    1.95215518471351631108e-04, -2.85781685962277938680e-03, 1.03923736576817238437e-01,
    2.72062619048444266945e+00,
)
_AN = (
    3.46538101525629032477e-01, 1.20075952739645805542e+01, 7.62796053615234516538e+01,
    1.68089224934630576269e+02, 1.59756391350164413639e+02, 7.05360906840444183113e+01,
    1.40264691163389668864e+01, 9.99999999999999995305e-01,
)
_AD = (
    5.67594532638770212846e-01, 1.47562562584847203173e+01, 8.45138970141474626562e+01,
    1.77318088145400459522e+02, 1.64234692871529701831e+02, 7.14778400825575695274e+01,
    1.40959135607834029598e+01, 1.00000000000000000470e+00,
)
_AFN = (
    -1.31696323418331795333e-01, -6.26456544431912369773e-01, -6.93158036036933542233e-01,
    -2.79779981545119124951e-01, -4.91900132609500318020e-02, -4.06265923594885404393e-03,
    -1.59276496239262096340e-04, -2.77649108155232920844e-06, -1.67787698489114633780e-08,
)
_AFD = (
    1.33560420706553243746e+01, 3.26825032795224613948e+01, 2.67367040941499554804e+01,
    9.18707402907259625840e+00, 1.47529146771666414581e+00, 1.15687173795188044134e-01,
    4.40291641615211203805e-03, 7.54720348287414296618e-05, 4.51850092970580378464e-07,
)
_AGN = (
    1.97339932091685679179e-02, 3.91103029615688277255e-01, 1.06579897599595591108e+00,
    9.39169229816650230044e-01, 3.51465656105547619242e-01, 6.33888919628925490927e-02,
    5.85804113048388458567e-03, 2.82851600836737019778e-04, 6.98793669997260967291e-06,
    8.11789239554389293311e-08, 3.41551784765923618484e-10,
)
_AGD = (
    9.30892908077441974853e+00, 1.98352928718312140417e+01, 1.55646628932864612953e+01,
    5.47686069422975497931e+00, 9.54293611618961883998e-01, 8.64580826352392193095e-02,
    4.12656523824222607191e-03, 1.01259085116509135510e-04, 1.17166733214413521882e-06,
    4.91834570062930015649e-09,
)


def _k_series(x, i_of_x, near_coefs, far_coefs, order: int, scaled: bool):
    """K0 (order 0) or K1 (order 1) of x, times e^x if `scaled`: inf at 0, NaN below."""
    log_half_x = jnp.log(0.5 * x)
    a = chbevl(x * x - 2.0, near_coefs)
    near = a - log_half_x * i_of_x if order == 0 else log_half_x * i_of_x + a / x
    far = chbevl(8.0 / x - 2.0, far_coefs) / jnp.sqrt(x)
    out = jnp.where(x <= 2.0, near * jnp.exp(x), far) if scaled else \
        jnp.where(x <= 2.0, near, jnp.exp(-x) * far)
    return jnp.where(x == 0, jnp.inf, jnp.where(x < 0, jnp.nan, out))


def modified_bessel_k0(x):
    return _k_series(x, jss.i0(x), _K0_A, _K0_B, 0, False)


def modified_bessel_k1(x):
    return _k_series(x, jss.i1(x), _K1_A, _K1_B, 1, False)


def scaled_modified_bessel_k0(x):
    return _k_series(x, jss.i0(x), _K0_A, _K0_B, 0, True)


def scaled_modified_bessel_k1(x):
    return _k_series(x, jss.i1(x), _K1_A, _K1_B, 1, True)


_INV_SQRT_PI = 5.64189583547756286948e-01
_AI_C1, _AI_C2 = 0.355028053887817239260, 0.258819403792806798405  # Ai(0), -Ai'(0)


def _airy_series(x):
    """Ai's Maclaurin series c1 f(x) - c2 g(x), summed until the term of f is below
    epsilon relative to f (per element, as eager's loop)."""
    eps = jnp.finfo(x.dtype).eps
    z = x * x * x
    one = jnp.ones_like(x)

    def step(state):
        k, f, g, m, n, t = state
        on = t > eps
        m1 = m * z / (k + 1.0)
        n1 = n * z / (k + 2.0)
        m1 = m1 / (k + 2.0)
        n1 = n1 / (k + 3.0)
        f1, g1 = f + m1, g + n1
        pick = lambda new, old: jnp.where(on, new, old)  # noqa: E731
        return (k + 3.0, pick(f1, f), pick(g1, g), pick(m1, m), pick(n1, n), pick(jnp.abs(m1 / f1), t))

    near = (x >= -2.09) & (x < 2.09)
    state = (jnp.asarray(1.0, x.dtype), one, x, one, x, jnp.where(near, one, 0.0))
    _, f, g, _, _, _ = lax.while_loop(lambda s: jnp.any(s[5] > eps), step, state)
    return _AI_C1 * f - _AI_C2 * g


def _zeta(x):
    """2/3 |x|^(3/2) with eager's rounding: for x ~ -1e4 the phase below is ~1e6, where
    one float32 ulp (0.06) moves Ai by more than the tolerance."""
    return exact_div(2.0 * jnp.abs(x) * jnp.sqrt(jnp.abs(x)), 3.0)


def airy_ai(x):
    # x < -2.09: oscillating, a phase and amplitude rational in 1/zeta^2
    zeta = _zeta(x)
    z = 1.0 / zeta
    zz = z * z
    t = zeta + 0.25 * np.pi
    oscillating = _INV_SQRT_PI / jnp.sqrt(jnp.sqrt(-x)) * (
        jnp.sin(t) * (1.0 + zz * polevl(zz, _AFN) / polevl(zz, _AFD))
        - jnp.cos(t) * (z * polevl(zz, _AGN) / polevl(zz, _AGD)))
    # x >= 2.09: exponentially decaying, rational in 1/zeta
    decaying = _INV_SQRT_PI * (polevl(1.0 / zeta, _AN) / polevl(1.0 / zeta, _AD)) \
        / (2.0 * jnp.sqrt(jnp.sqrt(x)) * jnp.exp(zeta))
    out = jnp.where(x < -2.09, oscillating, jnp.where(x >= 2.09, decaying, _airy_series(x)))
    return jnp.where(jnp.isinf(x), jnp.nan, jnp.where(x > 103.892, 0.0, out))


for _op, _fn in ((aten.special_modified_bessel_i0.default, jss.i0),
                 (aten.special_modified_bessel_i1.default, jss.i1),
                 (aten.special_modified_bessel_k0.default, modified_bessel_k0),
                 (aten.special_modified_bessel_k1.default, modified_bessel_k1),
                 (aten.special_scaled_modified_bessel_k0.default, scaled_modified_bessel_k0),
                 (aten.special_scaled_modified_bessel_k1.default, scaled_modified_bessel_k1),
                 (aten.special_airy_ai.default, airy_ai)):
    register(_op)(float_unary(_fn))
