"""GA3C's preprocessing and frame stacking around one GameManager.

Atari games: each grayscale frame is resized to (IMAGE_HEIGHT, IMAGE_WIDTH) (RESIZE_INTERPOLATION), kept uint8,
and the state is the last STACKED_FRAMES frames, shape (H, W, STACKED_FRAMES), oldest first, newest last: the
original's layout (its frame queue transposed to [1, 2, 0]), which is also the memory order the CPU's convolution
wants (channels last: the model reads it as NCHW without a copy; with the int8 scaling in NetworkVP, a training
step on 80 Pong states took 18 ms instead of 24, a prediction on 16 states 1.4 ms instead of 2.1). Scaling to
[-1, 1) (x / 128 - 1) happens where the model runs. FRAME_RESCALE=True with RESIZE_INTERPOLATION='pillow' is the
original's scipy.misc.imresize: every frame stretched to 0..255 by its own minimum and maximum, then Pillow's
bilinear resize. EPISODE_START chooses how an episode's first state is filled (see reset). Vector games
(CartPole, Acrobot, ...): the state is the observation as a float32 vector, not stacked.

The state returned by reset() and step() is a READ-ONLY VIEW of this Environment's internal buffer, overwritten by
the next reset() or step(): a caller that keeps a state must copy it (writing it into a shared-memory slot is such a
copy). This saves an allocation and a copy per step.

Imported by agent processes: numpy, gymnasium, ale_py and cv2 only (no torch; Pillow with 'pillow').
"""

from __future__ import annotations

import sys
import time

import cv2
import gymnasium as gym
import numpy as np

from ga3c.errors import ConfigError
from ga3c.GameManager import GameManager
from ga3c.VectorEncoder import VectorEncoder

_INTERPOLATIONS = {'linear': cv2.INTER_LINEAR, 'area': cv2.INTER_AREA, 'pillow': None}
# The original's grayscale (ITU-R 601 luma), computed in floating point from the RGB screen
_GRAY_WEIGHTS = (0.299, 0.587, 0.114)
NOOP = 0  # action 0 is NOOP in every ALE game
# A pixel's stack of 1, 2, 4 or 8 frames read as one little-endian integer: shifting it right by 8 bits moves every
# frame one place older (5 us for a Pong state, against 77 us for numpy's strided copy of the frames)
_PIXEL_INTS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64} if sys.byteorder == 'little' else {}


def min_max_stretch(gray: np.ndarray) -> np.ndarray:
    """The original's per-frame rescale (scipy.misc.bytescale, which scipy.misc.imresize applied to float
    frames): (x - min) * 255 / (max - min), rounded half up to uint8; a uniform frame becomes all 0."""
    low, high = float(gray.min()), float(gray.max())
    scale = 255.0 / ((high - low) or 1.0)
    out = (gray - low) * scale
    np.clip(out, 0.0, 255.0, out=out)
    out += 0.5
    return out.astype(np.uint8)


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
            self._pil = None
            if interp == 'pillow':
                try:
                    from PIL import Image
                except ImportError:
                    raise ConfigError("RESIZE_INTERPOLATION='pillow' needs Pillow, which is not installed: "
                                      "pip install pillow, or choose 'linear' or 'area'") from None
                self._pil = Image
            self._rescale = bool(cfg.FRAME_RESCALE)
            self._noop_start = cfg.EPISODE_START == 'noop'
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
            self._buf = np.zeros((self._h, self._w, self._k), dtype=np.uint8)
            self._frame = np.empty((self._h, self._w), dtype=np.uint8)  # the newest frame, before it is stacked
            pixel = _PIXEL_INTS.get(self._k)
            self._pixels = self._buf.view(pixel).reshape(self._h, self._w) if pixel else None
        else:
            self._encoder = VectorEncoder(space, cfg.ATARI_GAME)
            self._buf = self._encoder.vector
        self._state = self._buf.view()
        self._state.flags.writeable = False

    # ----------------------------------------------------------------------------------------------- preprocessing
    def _push(self, obs: np.ndarray) -> None:
        """Every frame of the stack one place older, the preprocessed `obs` newest."""
        if self._k > 1:
            if self._pixels is not None:
                np.right_shift(self._pixels, 8, out=self._pixels)
            else:
                self._buf[:, :, :-1] = self._buf[:, :, 1:].copy()
        self._frame_into(obs, self._frame)
        self._buf[:, :, -1] = self._frame

    def _frame_into(self, obs: np.ndarray, dst: np.ndarray) -> None:
        if self._rescale:
            obs = min_max_stretch(self._float_gray(obs) if self._rgb else obs.astype(np.float64))
        elif self._rgb:
            cv2.cvtColor(obs, cv2.COLOR_RGB2GRAY, dst=self._gray)
            obs = self._gray
        if self._pil is not None:
            dst[:] = np.asarray(self._pil.fromarray(obs).resize((self._w, self._h), self._pil.BILINEAR))
        else:
            cv2.resize(obs, (self._w, self._h), dst=dst, interpolation=self._interp)

    @staticmethod
    def _float_gray(rgb: np.ndarray) -> np.ndarray:
        """The original's np.dot(rgb, weights), written out: 5x faster than np.dot over an axis of 3, and equal to it
        after the stretch on every pixel of 1,500 frames of five games (the sums differ in the last bit at most)."""
        r, g, b = _GRAY_WEIGHTS
        out = rgb[..., 0] * r
        out += rgb[..., 1] * g
        out += rgb[..., 2] * b
        return out

    def _vector_into(self, obs) -> None:
        """Spaces other than a flat Box are flattened or one-hot encoded (see VectorEncoder)."""
        self._encoder.encode(obs)

    # ----------------------------------------------------------------------------------------------------- API
    def reset(self) -> np.ndarray:
        """Start an episode; returns the state (a read-only view of the internal buffer: copy it to keep it).

        Images, EPISODE_START='repeat': the reset frame fills the stack. 'noop', the original's: the reset frame,
        then one frame per no-op step, max(1, STACKED_FRAMES - 1) of them (the original's frame queue counted its
        first state from the first step after a reset), whose rewards and ends are ignored, as the original's."""
        obs = self.game.reset()
        self.total_reward = 0.0
        if self._is_atari:
            self._push(obs)
            if self._noop_start:
                for _ in range(max(1, self._k - 1)):
                    self._push(self.game.step(NOOP)[0])
            else:
                self._buf[:] = self._buf[:, :, -1:]
        else:
            self._vector_into(obs)
        return self._state

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool]:
        """One agent step: (state, raw unclipped reward, terminated, truncated); state as in reset()."""
        obs, reward, terminated, truncated = self.game.step(action)
        self.total_reward += reward
        start = time.perf_counter()
        if self._is_atari:
            self._push(obs)
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
