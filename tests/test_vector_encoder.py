"""VectorEncoder: every vector observation space as one flat float32 vector, checked against arrays written out by
hand and against gymnasium's own flatten(); real popgym and MiniGrid envs through Environment; and the spaces that
cannot be encoded, as one ConfigError each."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.spaces.utils import flatten

from ga3c.Config import Config
from ga3c.Environment import Environment
from ga3c.errors import ConfigError
from ga3c.GameManager import GameManager
from ga3c.VectorEncoder import MAX_ONE_HOT, VectorEncoder

S = gym.spaces


def encode(space, obs) -> np.ndarray:
    return VectorEncoder(space, 'G').encode(obs).copy()


@pytest.mark.parametrize('space, obs, expected', [
    (S.Box(-1, 1, (3,)), np.array([0.5, -1, 0.25], np.float32), [0.5, -1, 0.25]),
    (S.Box(-9, 9, (2, 3), dtype=np.float64), np.arange(6.0).reshape(2, 3), [0, 1, 2, 3, 4, 5]),
    (S.Box(0, 255, (2, 1, 2), dtype=np.uint8), np.array([[[7, 8]], [[9, 250]]], np.uint8), [7, 8, 9, 250]),
    (S.Discrete(4), 2, [0, 0, 1, 0]),
    (S.Discrete(3, start=-1), -1, [1, 0, 0]),
    (S.MultiDiscrete([2, 3]), np.array([1, 2]), [0, 1, 0, 0, 1]),
    (S.MultiDiscrete([[2, 3], [1, 2]], start=[[1, 0], [5, -1]]), np.array([[2, 0], [5, 0]]),
     [0, 1, 1, 0, 0, 1, 0, 1]),
    (S.MultiBinary(3), np.array([1, 0, 1], np.int8), [1, 0, 1]),
    (S.MultiBinary([2, 2]), np.array([[0, 1], [1, 1]], np.int8), [0, 1, 1, 1]),
    # Dict: the space's key order (gymnasium sorts the keys), whatever the order of the observation's keys
    (S.Dict({'b': S.Discrete(2), 'a': S.Box(0, 1, (2,))}), {'b': 1, 'a': np.array([0.5, 0.75], np.float32)},
     [0.5, 0.75, 0, 1]),
    (S.Tuple((S.Discrete(2), S.Tuple((S.MultiBinary(2), S.Dict({'x': S.Discrete(3)}))))),
     (0, (np.array([1, 1], np.int8), {'x': 2})), [1, 0, 1, 1, 0, 0, 1]),
])
def test_encodings_written_out(space, obs, expected):
    out = encode(space, obs)
    assert out.dtype == np.float32 and out.shape == (len(expected),)
    np.testing.assert_array_equal(out, np.asarray(expected, np.float32))


NESTED = S.Dict({
    'pos': S.Box(-5, 5, (2, 2)),
    'card': S.Discrete(5, start=2),
    'grid': S.MultiDiscrete([[3, 4], [2, 6]]),
    'bits': S.MultiBinary(4),
    'more': S.Tuple((S.Discrete(2), S.Dict({'z': S.MultiDiscrete([7]), 'y': S.Box(0, 255, (3, 3, 3), np.uint8)}))),
})


def test_encodings_equal_gymnasium_flatten_on_samples():
    NESTED.seed(7)
    encoder = VectorEncoder(NESTED, 'G')
    for _ in range(200):
        obs = NESTED.sample()
        np.testing.assert_array_equal(encoder.encode(obs), flatten(NESTED, obs).astype(np.float32))
    # 200 observations through one encoder: each one-hot was cleared before the next was written
    assert encoder.vector.size == 4 + 5 + 15 + 4 + 2 + 7 + 27


@pytest.mark.parametrize('space, obs', [
    (S.Discrete(3), 3),
    (S.Discrete(3, start=1), 0),
    (S.MultiDiscrete([2, 2]), np.array([0, 2])),
    (S.MultiDiscrete([2, 2]), np.array([-1, 0])),
    (S.MultiDiscrete([2, 2]), np.array([0, 0, 0])),
])
def test_values_outside_the_space_raise(space, obs):
    with pytest.raises(ValueError, match=r'^G: the observation: .* is outside'):
        encode(space, obs)


@pytest.mark.parametrize('space, message', [
    (S.Text(8), r"^G: the observation is Text \(Text\(1, 8, .*\)\), which cannot be encoded as numbers"),
    (S.Dict({'img': S.Box(0, 1, (2,)), 'mission': S.Text(5)}),
     r"^G: the observation\['mission'\] is Text .*cannot be encoded.*ATARI_GAME=yourmodule:YourEnv-v0\)$"),
    (S.Tuple((S.Discrete(2), S.Sequence(S.Discrete(2)))), r"^G: the observation\[1\] is Sequence"),
    (S.Graph(S.Box(0, 1, (2,)), S.Discrete(2)), r"^G: the observation is Graph"),
    (S.OneOf((S.Discrete(2), S.Discrete(3))), r"^G: the observation is OneOf"),
    (S.Discrete(MAX_ONE_HOT + 1), rf"^G: the observation is Discrete\({MAX_ONE_HOT + 1}\): a one-hot of "
                                  rf"{MAX_ONE_HOT + 1} entries is too wide"),
    (S.MultiDiscrete([2, MAX_ONE_HOT + 1]), r"^G: the observation is MultiDiscrete.*too wide"),
    (S.Box(0, 1, (0,)), r"^G: the observation space .* encodes to nothing$"),
])
def test_what_cannot_be_encoded_is_one_config_error(space, message):
    with pytest.raises(ConfigError, match=message) as err:
        VectorEncoder(space, 'G')
    assert '\n' not in str(err.value)


# ---------------------------------------------------------------------------------------------------- real envs
def env_cfg(game: str) -> Config:
    cfg = Config()
    cfg.ATARI_GAME = game
    return cfg


def one_hot(i: int, n: int) -> np.ndarray:
    out = np.zeros(n, np.float32)
    out[i] = 1
    return out


@pytest.mark.parametrize('game, encoded', [
    # CountRecallEasy: MultiDiscrete([2 2]) -> two one-hots of 2
    ('popgym:popgym-CountRecallEasy-v0', lambda o: np.concatenate([one_hot(o[0], 2), one_hot(o[1], 2)])),
    # AutoencodeEasy: Tuple(Discrete(2), Discrete(4))
    ('popgym:popgym-AutoencodeEasy-v0', lambda o: np.concatenate([one_hot(o[0], 2), one_hot(o[1], 4)])),
    # ConcentrationEasy: MultiDiscrete of 52 cards, each 3 values
    ('popgym:popgym-ConcentrationEasy-v0', lambda o: np.concatenate([one_hot(v, 3) for v in o])),
    # MiniGrid's Dict: direction (one-hot of 4), the 7x7x3 grid code flattened; its fixed mission left out
    ('minigrid:MiniGrid-MemoryS7-v0',
     lambda o: np.concatenate([one_hot(o['direction'], 4), o['image'].astype(np.float32).ravel()])),
])
def test_real_envs_states_equal_independent_encodings(game, encoded):
    cfg = env_cfg(game)
    env, raw = Environment(cfg, seed=3), GameManager(game, cfg, seed=3)
    try:
        assert not env.is_atari
        rng = np.random.default_rng(0)
        obs, state = raw.reset(), env.reset()
        for _ in range(30):
            np.testing.assert_array_equal(state, encoded(obs))
            assert state.shape == env.state_shape
            action = int(rng.integers(env.num_actions))
            obs, _, done, cut = raw.step(action)
            state, _, done2, cut2 = env.step(action)
            assert (done, cut) == (done2, cut2)
            if done or cut:
                obs, state = raw.reset(), env.reset()
    finally:
        env.close()
        raw.close()


def test_minigrid_mission_with_placeholders_is_refused():
    # Fetch's mission names the object to fetch ("get a {color} {type}"): information that cannot be encoded
    with pytest.raises(ConfigError, match=r"^minigrid:MiniGrid-Fetch-5x5-N2-v0: the observation\['mission'\] is "
                                          r"MissionSpace .* cannot be encoded as numbers"):
        Environment(env_cfg('minigrid:MiniGrid-Fetch-5x5-N2-v0'), seed=0)


class BoxEnv(gym.Env):
    """A Box observation of a given shape and dtype: a ramp, then the ramp plus the step count."""

    def __init__(self, shape=(3, 4), dtype=np.float32):
        self.observation_space = S.Box(0, 255, shape, dtype=dtype)
        self.action_space = S.Discrete(2)
        self.ramp = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.ramp.copy(), {}

    def step(self, action):
        self.t += 1
        return self.ramp + self.t, 0.0, self.t >= 5, False, {}


gym.register('ga3c-test-FloatBox-v0', entry_point=BoxEnv)
gym.register('ga3c-test-ByteBox-v0', entry_point=BoxEnv, kwargs={'shape': (30, 40), 'dtype': np.uint8})


def test_float_box_with_two_dims_is_a_vector_and_byte_box_an_image():
    env = Environment(env_cfg('ga3c-test-FloatBox-v0'), seed=0)
    try:
        assert not env.is_atari and env.state_shape == (12,) and env.state_dtype == np.float32
        np.testing.assert_array_equal(env.reset(), np.arange(12, dtype=np.float32))
        np.testing.assert_array_equal(env.step(0)[0], np.arange(12, dtype=np.float32) + 1)
    finally:
        env.close()
    env = Environment(env_cfg('ga3c-test-ByteBox-v0'), seed=0)
    try:
        assert env.is_atari and env.state_shape == (84, 84, 4) and env.state_dtype == np.uint8
    finally:
        env.close()
