"""GA3C's preprocessing and frame stacking around one GameManager.

Atari games: each grayscale frame is resized to (IMAGE_HEIGHT, IMAGE_WIDTH) with OpenCV, kept uint8 with no
contrast stretching (the original's quirk 9 is not reproduced), and the state is the last STACKED_FRAMES frames,
shape (STACKED_FRAMES, H, W), oldest first, newest last. Scaling to [-1, 1) (x / 128 - 1) happens where the model
runs. Vector games (CartPole, Acrobot, ...): the state is the observation as a float32 vector, not stacked.

The state returned by reset() and step() is a READ-ONLY VIEW of this Environment's internal buffer, overwritten by
the next reset() or step(): a caller that keeps a state must copy it (writing it into a shared-memory slot is such a
copy). This saves an allocation and a copy per step.

Imported by agent processes: numpy, gymnasium, ale_py and cv2 only (no torch).
"""

from __future__ import annotations

import time

import cv2
import gymnasium as gym
import numpy as np

from ga3c.errors import ConfigError
from ga3c.GameManager import GameManager
from ga3c.VectorEncoder import VectorEncoder

_INTERPOLATIONS = {'linear': cv2.INTER_LINEAR, 'area': cv2.INTER_AREA}


class Environment:
    """One game with GA3C's preprocessing; see the module docstring for what a state is and who owns it."""

    def __init__(self, cfg, seed: int, render_mode: str | None = None):
        self.game = GameManager(cfg.ATARI_GAME, cfg, seed, render_mode=render_mode)
        try:
            self._setup(cfg)
        except BaseException:
            self.game.close()
            raise
        self.total_reward = 0.0
        self.preprocess_seconds = 0.0  # time spent in resize + stacking (the benchmark's --profile reads it)

    def _setup(self, cfg) -> None:
        game = self.game
        action_space = game.action_space
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError(f'{cfg.ATARI_GAME}: only discrete action spaces are supported; its action space is '
                              f'{action_space}')
        self._num_actions = int(action_space.n)
        space = game.observation_space
        self._is_atari = game.is_atari
        if self._is_atari:
            interp = str(cfg.RESIZE_INTERPOLATION).lower()
            if interp not in _INTERPOLATIONS:
                raise ConfigError(f'RESIZE_INTERPOLATION={cfg.RESIZE_INTERPOLATION!r}: expected one of '
                                  f'{sorted(_INTERPOLATIONS)}')
            self._interp = _INTERPOLATIONS[interp]
            self._k = int(cfg.STACKED_FRAMES)
            self._h, self._w = int(cfg.IMAGE_HEIGHT), int(cfg.IMAGE_WIDTH)
            if self._k < 1 or self._h < 1 or self._w < 1:
                raise ConfigError(f'STACKED_FRAMES, IMAGE_HEIGHT and IMAGE_WIDTH must be positive, got '
                                  f'{self._k}, {self._h}, {self._w}')
            self._rgb = len(space.shape) == 3
            self._gray = None
            if self._rgb:
                if space.shape[2] != 3:
                    raise ConfigError(f'{cfg.ATARI_GAME}: image observations must be grayscale or RGB, got '
                                      f'{space}')
                self._gray = np.empty(space.shape[:2], dtype=np.uint8)
            self._buf = np.zeros((self._k, self._h, self._w), dtype=np.uint8)
        else:
            self._encoder = VectorEncoder(space, cfg.ATARI_GAME)
            self._buf = self._encoder.vector
        self._state = self._buf.view()
        self._state.flags.writeable = False

    # ----------------------------------------------------------------------------------------------- preprocessing
    def _frame_into(self, obs: np.ndarray, dst: np.ndarray) -> None:
        if self._rgb:
            cv2.cvtColor(obs, cv2.COLOR_RGB2GRAY, dst=self._gray)
            obs = self._gray
        cv2.resize(obs, (self._w, self._h), dst=dst, interpolation=self._interp)

    def _vector_into(self, obs) -> None:
        """Spaces other than a flat Box are flattened or one-hot encoded (see VectorEncoder)."""
        self._encoder.encode(obs)

    # ----------------------------------------------------------------------------------------------------- API
    def reset(self) -> np.ndarray:
        """Start an episode; returns the state (a read-only view of the internal buffer: copy it to keep it)."""
        obs = self.game.reset()
        self.total_reward = 0.0
        if self._is_atari:
            buf = self._buf
            self._frame_into(obs, buf[-1])
            buf[:-1] = buf[-1]
        else:
            self._vector_into(obs)
        return self._state

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool]:
        """One agent step: (state, raw unclipped reward, terminated, truncated); state as in reset()."""
        obs, reward, terminated, truncated = self.game.step(action)
        self.total_reward += reward
        start = time.perf_counter()
        if self._is_atari:
            buf = self._buf
            if self._k > 1:
                buf[:-1] = buf[1:]  # shift in place (numpy buffers the overlapping copy)
            self._frame_into(obs, buf[-1])
        else:
            self._vector_into(obs)
        self.preprocess_seconds += time.perf_counter() - start
        return self._state, reward, terminated, truncated

    def frame(self) -> np.ndarray | None:
        """The current raw RGB frame (for videos) when render_mode='rgb_array', else None."""
        return self.game.render()

    def close(self) -> None:
        self.game.close()

    @property
    def state(self) -> np.ndarray:
        return self._state

    @property
    def state_shape(self) -> tuple:
        return tuple(self._buf.shape)

    @property
    def state_dtype(self) -> np.dtype:
        return self._buf.dtype

    @property
    def num_actions(self) -> int:
        return self._num_actions

    @property
    def is_atari(self) -> bool:
        return self._is_atari

    @property
    def fps(self) -> float:
        return self.game.fps

    @property
    def note(self) -> str | None:
        """The game-id note from resolve_game_id (e.g. how an original id was mapped), or None."""
        return self.game.note


def probe_environment(cfg) -> tuple[tuple, np.dtype, int, bool]:
    """(state_shape, state_dtype, num_actions, is_atari) of cfg.ATARI_GAME, from one env created and closed."""
    env = Environment(cfg, seed=int(getattr(cfg, 'SEED', 0)))
    try:
        return env.state_shape, env.state_dtype, env.num_actions, env.is_atari
    finally:
        env.close()
