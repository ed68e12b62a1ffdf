"""Small JAX training steps the tests trace (imported by test modules: pytest puts tests/ on sys.path)."""

import jax
import jax.numpy as jnp
import optax


def mlp_step(widths=(8, 16, 16, 4), batch=4):
    """(step, params, opt_state, x): an SGD step of a tanh MLP with layer widths `widths` on a batch of ones."""
    params = {f"w{k + 1}": jnp.ones((a, b)) for k, (a, b) in enumerate(zip(widths[:-1], widths[1:]))}
    tx = optax.sgd(0.1)

    def step(p, s, x):
        def loss(q):
            h = x
            for k in range(len(q)):
                h = h @ q[f"w{k + 1}"]
                h = jnp.tanh(h) if k + 1 < len(q) else h
            return jnp.sum(h)
        u, s = tx.update(jax.grad(loss)(p), s, p)
        return optax.apply_updates(p, u), s

    return step, params, tx.init(params), jnp.ones((batch, widths[0]))
