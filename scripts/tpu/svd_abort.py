"""Narrows down the XLA:TPU abort in the batched thin SVD test (`TransposeFolding`: "Check
failed: buffer != nullptr", tests/ops/test_linalg_decomp.py `_svd_invariants`): each case
compiles one form of it in a process of its own and reports its exit status and libtpu's
fatal line, so an abort ends only its case.

    python scripts/tpu/svd_abort.py            # every case
    python scripts/tpu/svd_abort.py CASE       # one, in this process

On the TPU v5e (JAX 0.10.2, 2026-12-07) every JAX case compiled (default and "highest"
precision, the diagonal product too) and lazyxla's forward and backward aborted: JAX's TPU
SVD expanded under x64 mode. Since JAX's own algorithms are lowered out of x64 under the
TPU's rule (compile/without_x64.py), every case compiles (2026-12-08; docs/compat-matrix.md).
"""
import subprocess
import sys
import time

CASES = ["jax_s", "jax_products", "jax_products_highest", "jax_diag_highest", "jax_grad",
         "lazy_forward", "lazy_backward", "lazy_s", "lazy_scaled", "lazy_diag"]


def _products(jnp, a, precision=None, diagonal=False):
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    scaled = (jnp.matmul(u, s[..., :, None] * jnp.eye(s.shape[-1]), precision=precision) if diagonal
              else u * s[..., None, :])
    return s, jnp.matmul(scaled, vh, precision=precision)


def run(case: str) -> None:
    import jax
    import jax.numpy as jnp
    a = jax.random.normal(jax.random.key(0), (2, 5, 3), jnp.float32)
    if case.startswith("jax"):
        forms = {"jax_s": lambda a: jnp.linalg.svd(a, full_matrices=False),
                 "jax_products": lambda a: _products(jnp, a),
                 "jax_products_highest": lambda a: _products(jnp, a, "highest"),
                 "jax_diag_highest": lambda a: _products(jnp, a, "highest", diagonal=True),
                 "jax_grad": jax.grad(lambda a: sum(jnp.sum(o) for o in _products(jnp, a)))}
        jax.block_until_ready(jax.jit(forms[case])(a))
    else:
        import torch
        import lazyxla as lx
        t = torch.randn(2, 5, 3).to(lx.device()).requires_grad_(case == "lazy_backward")
        u, s, vh = torch.linalg.svd(t, full_matrices=False)
        outs = {"lazy_s": (s,), "lazy_scaled": ((u * s.unsqueeze(-2)) @ vh,),
                "lazy_diag": (u @ torch.diag_embed(s) @ vh,)}.get(
            case, (s, u @ torch.diag_embed(s) @ vh, (u * s.unsqueeze(-2)) @ vh))
        if case == "lazy_backward":
            sum(o.sum() for o in outs).backward()
            t.grad.cpu()
        else:
            [o.cpu() for o in outs]
    print("ok", case, flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        run(sys.argv[1])
    else:
        for case in CASES:
            started = time.time()
            p = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True, timeout=120)
            lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith(("ok", "F0", "F1")) or "Check failed" in ln]
            print(f"{case}: exit {p.returncode} in {time.time() - started:.1f} s; {lines[-1][:300] if lines else ''}", flush=True)
