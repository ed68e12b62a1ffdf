"""Recurrent blocks shared by the NMT, RNNLM and ENAS-PTB programs.

Recurrences are unrolled by plain Python loops in the callers (never `scan`), so each time step becomes its
own equations in the traced graph, as in the statically unrolled graphs the placement papers use.
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


class LSTMState(NamedTuple):
    """State of one LSTM layer."""

    c: jax.Array  # float32[B, H] memory cell
    h: jax.Array  # float32[B, H] output


def zero_state(batch: int, hidden: int) -> LSTMState:
    """All-zero LSTM state, float32[batch, hidden] each."""
    zeros = jnp.zeros((batch, hidden), jnp.float32)
    return LSTMState(zeros, zeros)


class LSTMCell(nn.Module):
    """One LSTM time step, one fused gate matmul (TF's BasicLSTMCell).

    Calling the same instance at every time step shares its weights across steps.
    """

    hidden: int
    """Width H of the state."""
    forget_bias: float = 1.0
    """Added to the forget gate pre-activation."""

    @nn.compact
    def __call__(self, state: LSTMState, x: jax.Array) -> LSTMState:
        """The next LSTM state.

        Args:
            state: c, h float32[B, H].
            x: float32[B, D].

        Returns:
            the next state, c, h float32[B, H].
        """
        z = nn.Dense(4 * self.hidden, name="gates")(jnp.concatenate([x, state.h], axis=-1))
        i, f, g, o = jnp.split(z, 4, axis=-1)  # float32[B, H] each
        c = jax.nn.sigmoid(f + self.forget_bias) * state.c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return LSTMState(c, h)


class SoftmaxLoss(nn.Module):
    """Projection to the vocabulary and mean cross-entropy, one scope."""

    vocab: int
    """Number of output classes V."""

    @nn.compact
    def __call__(self, hidden: jax.Array, targets: jax.Array) -> jax.Array:
        """The mean softmax cross-entropy of `hidden` against `targets`.

        Args:
            hidden: float32[B, T, H].
            targets: int32[B, T].

        Returns:
            float32[] mean loss.
        """
        logits = nn.Dense(self.vocab, name="projection")(hidden)  # float32[B, T, V]
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def unroll(cell: nn.Module, state: LSTMState, xs: list[jax.Array]) -> tuple[LSTMState, list[jax.Array]]:
    """Run `cell` over xs with a Python loop: (final state, outputs h_t).

    xs: each float32[B, D].
    """
    outputs = []
    for x in xs:
        state = cell(state, x)
        outputs.append(state.h)
    return state, outputs


def time_slices(x: jax.Array) -> list[jax.Array]:
    """float32[B, T, D] -> T slices float32[B, D], one equation each.

    So the time steps stay separate nodes.
    """
    return [x[:, t] for t in range(x.shape[1])]


def lm_tokens(rng, batch: int, steps: int, vocab: int, abstract: bool = False) -> dict:
    """Example LM batch: inputs and targets int32[batch, steps].

    The targets are the next tokens. With `abstract`, their jax.ShapeDtypeStructs (nothing drawn).
    """
    if abstract:
        return {k: jax.ShapeDtypeStruct((batch, steps), jnp.int32) for k in ("inputs", "targets")}
    tokens = rng.integers(0, vocab, size=(batch, steps + 1), dtype="int32")
    return {"inputs": tokens[:, :-1], "targets": tokens[:, 1:]}
