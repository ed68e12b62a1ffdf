"""A Flax training step written the usual way: `train_step(state: TrainState, batch) -> (state, metrics)`.

Import it from this folder (no PYTHONPATH needed):

    placeto import-jax flax_trainstate:train_step --args-spec flax_trainstate:example_args \
        --out mlp.json.gz --grouped-out mlp.grouped.json.gz --groups 16 --export
"""

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn
from flax.training.train_state import TrainState


class MLP(nn.Module):
    hidden: int = 64  # units per hidden layer
    classes: int = 10

    @nn.compact
    def __call__(self, x):  # x: float32[batch, features] -> logits float32[batch, classes]
        x = nn.relu(nn.Dense(self.hidden)(x))
        x = nn.relu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.classes)(x)


def train_step(state: TrainState, batch):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, batch["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), {"loss": loss}


def example_args():
    """(state, batch): an MLP on 32 features with Adam, and a batch of 16 examples."""
    model = MLP()
    params = model.init(jax.random.key(0), jnp.ones((1, 32)))["params"]
    state = TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-3))
    batch = {"x": jnp.ones((16, 32)), "y": jnp.zeros((16,), jnp.int32)}
    return state, batch
