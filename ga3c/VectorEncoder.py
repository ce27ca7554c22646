"""Vector observations as one flat float32 vector, the input of the MLP network.

- Box (any shape that is not an image): its values, flattened (C order), cast to float32.
- Discrete(n, start): a one-hot of n entries (entry obs - start).
- MultiDiscrete(nvec, start): the one-hots of its elements, concatenated (flattened C order).
- MultiBinary(n or shape): its bits as 0.0/1.0, flattened.
- Dict: its sub-spaces encoded in the order of the space's keys (gymnasium sorts them), concatenated; Tuple: in
  its order. Nesting works; a Box of bytes inside a Dict or Tuple (MiniGrid's 7x7x3 grid code) is numbers too,
  not an image to preprocess.
- A MiniGrid mission that is always the same sentence (a MissionSpace without placeholders) carries nothing: it
  is left out. Any other Text, and Graph, Sequence, OneOf or an unknown space, cannot be: ConfigError.

Built once per environment; encode() runs every agent step, so each leaf writes into a view of the vector bound
at construction (no allocation per step beyond numpy's indexing). Imported by agent processes: no torch.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from ga3c.errors import ConfigError

MAX_ONE_HOT = 1 << 16  # entries of one Discrete's one-hot: wider is an id to embed, not to one-hot encode

_Leaf = tuple[int, Callable[[np.ndarray], Callable]]  # (size, bind: view -> writer)


def _box(space: gym.spaces.Box) -> _Leaf:
    shape = space.shape

    def bind(view):
        view = view.reshape(shape)

        def write(obs):
            view[...] = obs
        return write
    return int(np.prod(shape, dtype=np.int64)), bind


def _discrete(space: gym.spaces.Discrete, where: str) -> _Leaf:
    n, start = int(space.n), int(space.start)
    if n > MAX_ONE_HOT:
        raise ConfigError(f'{where} is {space}: a one-hot of {n} entries is too wide (at most {MAX_ONE_HOT}); wrap '
                          'the env so it gives a smaller observation')

    def bind(view):
        def write(obs):
            i = int(obs) - start
            if not 0 <= i < n:
                raise ValueError(f'{where}: {obs} is outside {space}')
            view.fill(0.0)
            view[i] = 1.0
        return write
    return n, bind


def _multi_discrete(space: gym.spaces.MultiDiscrete, where: str) -> _Leaf:
    nvec = np.asarray(space.nvec, dtype=np.int64).ravel()
    start = np.asarray(space.start, dtype=np.int64).ravel()
    if nvec.size and int(nvec.max()) > MAX_ONE_HOT:
        raise ConfigError(f'{where} is {space}: a one-hot of {int(nvec.max())} entries is too wide (at most '
                          f'{MAX_ONE_HOT}); wrap the env so it gives a smaller observation')
    offsets = np.concatenate(([0], np.cumsum(nvec)[:-1]))  # element j's one-hot starts at offsets[j]
    bounds = nvec.astype(np.uint64)  # values seen as unsigned: a negative one is huge, one comparison checks both

    def bind(view):
        def write(obs):
            values = np.asarray(obs, dtype=np.int64).ravel()
            if values.shape == nvec.shape:
                values = values - start
            if values.shape != nvec.shape or (values.view(np.uint64) >= bounds).any():
                raise ValueError(f'{where}: {obs} is outside {space}')
            view.fill(0.0)
            view[offsets + values] = 1.0
        return write
    return int(nvec.sum()), bind


def _multi_binary(space: gym.spaces.MultiBinary) -> _Leaf:
    return _box(gym.spaces.Box(0, 1, tuple(np.atleast_1d(space.n)), dtype=np.int8))


def _group(leaves: list[tuple[object, _Leaf]], pick: Callable) -> _Leaf:
    """A Dict or Tuple: its leaves side by side; pick(obs, key) is the sub-observation of key."""
    leaves = [(key, leaf) for key, leaf in leaves if leaf[0] > 0]
    size = sum(leaf[0] for _, leaf in leaves)

    def bind(view):
        writers, at = [], 0
        for key, (n, bind_leaf) in leaves:
            writers.append((key, bind_leaf(view[at:at + n])))
            at += n

        def write(obs):
            for key, leaf_write in writers:
                leaf_write(pick(obs, key))
        return write
    return size, bind


def _nothing() -> _Leaf:
    return 0, lambda view: (lambda obs: None)


def _leaf(space: gym.Space, where: str) -> _Leaf:
    if isinstance(space, gym.spaces.Box):
        return _box(space)
    if isinstance(space, gym.spaces.Discrete):
        return _discrete(space, where)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return _multi_discrete(space, where)
    if isinstance(space, gym.spaces.MultiBinary):
        return _multi_binary(space)
    if isinstance(space, gym.spaces.Dict):
        return _group([(k, _leaf(s, f'{where}[{k!r}]')) for k, s in space.spaces.items()], lambda o, k: o[k])
    if isinstance(space, gym.spaces.Tuple):
        return _group([(i, _leaf(s, f'{where}[{i}]')) for i, s in enumerate(space.spaces)], lambda o, i: o[i])
    if getattr(space, 'ordered_placeholders', False) is None:  # MiniGrid's MissionSpace of one fixed sentence
        return _nothing()
    raise ConfigError(f'{where} is {type(space).__name__} ({space}), which cannot be encoded as numbers (Box, '
                      'Discrete, MultiDiscrete, MultiBinary, and Dict or Tuple of them can): wrap the env in an '
                      'observation wrapper that drops or encodes it, registered by your own module '
                      '(ATARI_GAME=yourmodule:YourEnv-v0)')


class VectorEncoder:
    """The flat float32 vector of one observation space; see the module docstring for each space's encoding."""

    def __init__(self, space: gym.Space, game_id: str):
        size, bind = _leaf(space, f'{game_id}: the observation')
        if size == 0:
            raise ConfigError(f'{game_id}: the observation space {space} encodes to nothing')
        self.vector = np.zeros((size,), dtype=np.float32)
        self._write = bind(self.vector)

    def encode(self, obs) -> np.ndarray:
        """Writes obs into self.vector (overwritten by the next call) and returns it."""
        self._write(obs)
        return self.vector
