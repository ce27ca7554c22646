"""GameManager (game ids, the env) and Environment (preprocessing, frame stacking, seeding), on real ALE."""

import cv2
import numpy as np
import pytest

from ga3c.Config import Config
from ga3c.Environment import Environment, probe_environment
from ga3c.errors import ConfigError
from ga3c.GameManager import GameManager, resolve_game_id


def make_cfg(**overrides):
    cfg = Config()
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def run_steps(env, actions):
    states = [env.reset().copy()]
    for a in actions:
        state, _, terminated, truncated = env.step(int(a))
        states.append(state.copy())
        assert not (terminated or truncated)
    return np.array(states)


# ----------------------------------------------------------------------------------------------------- game ids
@pytest.mark.parametrize('old_id, new_id', [
    ('PongDeterministic-v0', 'ALE/Pong-v5'),
    ('PongDeterministic-v4', 'ALE/Pong-v5'),
    ('BreakoutDeterministic-v4', 'ALE/Breakout-v5'),
    ('SpaceInvadersDeterministic-v4', 'ALE/SpaceInvaders-v5'),
    ('PongNoFrameskip-v4', 'ALE/Pong-v5'),
    ('PongNoFrameskip-v0', 'ALE/Pong-v5'),
    ('Pong-v0', 'ALE/Pong-v5'),
    ('Pong-v4', 'ALE/Pong-v5'),
])
def test_original_ids_map_to_ale_v5(old_id, new_id):
    gym_id, kwargs, note = resolve_game_id(old_id, make_cfg())
    assert gym_id == new_id
    assert kwargs == {'frameskip': 4, 'repeat_action_probability': 0.0, 'obs_type': 'grayscale',
                      'full_action_space': False}
    assert note is not None and note.startswith(f'{old_id} is {new_id} with frameskip 4 and no sticky actions')


def test_pong_deterministic_note():
    _, _, note = resolve_game_id('PongDeterministic-v0', make_cfg())
    assert note == 'PongDeterministic-v0 is ALE/Pong-v5 with frameskip 4 and no sticky actions'


def test_ale_kwargs_follow_config():
    cfg = make_cfg(FRAMESKIP=2, REPEAT_ACTION_PROBABILITY=0.25)
    gym_id, kwargs, note = resolve_game_id('ALE/Breakout-v5', cfg)
    assert gym_id == 'ALE/Breakout-v5' and note is None
    assert kwargs == {'frameskip': 2, 'repeat_action_probability': 0.25, 'obs_type': 'grayscale',
                      'full_action_space': False}
    _, kwargs, note = resolve_game_id('PongDeterministic-v4', cfg)
    assert kwargs['frameskip'] == 2 and kwargs['repeat_action_probability'] == 0.25
    assert 'frameskip 2' in note and 'sticky actions 0.25' in note


@pytest.mark.parametrize('game_id', ['CartPole-v1', 'Acrobot-v1'])
def test_non_ale_ids_pass_through(game_id):
    assert resolve_game_id(game_id, make_cfg()) == (game_id, {}, None)


@pytest.mark.parametrize('typo, suggestion', [
    ('Pongg-v5', 'ALE/Pong-v5'),
    ('PongDeterministc-v4', 'PongDeterministic-v4'),
    ('cartpole-v1', 'CartPole-v1'),
])
def test_unknown_id_suggests_close_names(typo, suggestion):
    with pytest.raises(ConfigError) as err:
        resolve_game_id(typo, make_cfg())
    msg = str(err.value)
    assert msg.startswith(f"unknown game '{typo}'; did you mean '{suggestion}'?")


def test_unknown_id_raises_before_creating_anything():
    with pytest.raises(ConfigError, match='unknown game'):
        Environment(make_cfg(ATARI_GAME='NoSuchGame-v9'), seed=0)


def test_continuous_actions_rejected():
    with pytest.raises(ConfigError, match=r'Pendulum-v1.*discrete.*Box'):
        Environment(make_cfg(ATARI_GAME='Pendulum-v1'), seed=0)


# ------------------------------------------------------------------------------------------------ preprocessing
@pytest.fixture(scope='module')
def pong():
    env = Environment(make_cfg(), seed=3, render_mode='rgb_array')
    yield env
    env.close()


def test_atari_state_shape_dtype_and_properties(pong):
    state = pong.reset()
    assert state.shape == (84, 84, 4) == pong.state_shape  # the original's (H, W, frames)
    assert state.dtype == np.uint8 == pong.state_dtype
    assert pong.num_actions == 6 and pong.is_atari
    assert pong.fps == 15.0
    assert not state.flags.writeable  # a read-only view of the internal stack


def test_reset_fills_the_stack_with_the_first_frame(pong):
    state = pong.reset()
    for i in range(1, 4):
        np.testing.assert_array_equal(state[..., i], state[..., 0])


def test_newest_frame_is_last(pong):
    pong.reset()
    rng = np.random.default_rng(0)
    prev = pong.step(0)[0].copy()
    changed = 0
    for _ in range(20):
        state = pong.step(int(rng.integers(pong.num_actions)))[0]
        np.testing.assert_array_equal(state[..., :-1], prev[..., 1:])
        changed += not np.array_equal(state[..., -1], prev[..., -1])
        prev = state.copy()
    assert changed > 0


def test_frame_is_the_rgb_screen(pong):
    pong.reset()
    frame = pong.frame()
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8


def test_frame_is_none_without_rgb_render_mode():
    env = Environment(make_cfg(ATARI_GAME='CartPole-v1'), seed=0)
    try:
        env.reset()
        assert env.frame() is None
    finally:
        env.close()


@pytest.mark.parametrize('interp, flag, width, height', [
    ('linear', cv2.INTER_LINEAR, 84, 84),
    ('area', cv2.INTER_AREA, 84, 84),
    ('linear', cv2.INTER_LINEAR, 64, 48),
])
def test_resize_matches_cv2_and_is_not_contrast_stretched(interp, flag, width, height):
    cfg = make_cfg(RESIZE_INTERPOLATION=interp, IMAGE_WIDTH=width, IMAGE_HEIGHT=height)
    env = Environment(cfg, seed=5)
    raw = GameManager(cfg.ATARI_GAME, cfg, seed=5)
    try:
        actions = np.random.default_rng(1).integers(0, env.num_actions, 10)
        obs = raw.reset()
        assert obs.shape == (210, 160) and obs.dtype == np.uint8
        state = env.reset()
        assert state.shape == (height, width, 4)
        np.testing.assert_array_equal(state[..., -1], cv2.resize(obs, (width, height), interpolation=flag))
        for a in actions:
            obs = raw.step(int(a))[0]
            state = env.step(int(a))[0]
            np.testing.assert_array_equal(state[..., -1], cv2.resize(obs, (width, height), interpolation=flag))
        # Pong's gray levels do not span 0..255: a stretched frame would.
        assert state.min() > 0 and state.max() < 255
    finally:
        env.close()
        raw.close()


def test_bad_interpolation_rejected():
    with pytest.raises(ConfigError, match='RESIZE_INTERPOLATION'):
        Environment(make_cfg(RESIZE_INTERPOLATION='cubic'), seed=0)


# ------------------------------------------------------------------------------------------------------ seeding
def test_same_seed_same_states_different_seed_differs():
    # Sticky actions make the seed matter (without them Pong itself is deterministic given the actions).
    cfg = make_cfg(REPEAT_ACTION_PROBABILITY=0.25)
    actions = np.random.default_rng(7).integers(0, 6, 50)
    envs = [Environment(cfg, seed=s) for s in (11, 11, 12)]
    try:
        a, b, c = (run_steps(env, actions) for env in envs)
    finally:
        for env in envs:
            env.close()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


# ------------------------------------------------------------------------------------------------ vector games
def test_cartpole_is_a_float32_vector_and_terminates():
    cfg = make_cfg(ATARI_GAME='CartPole-v1')
    env = Environment(cfg, seed=0)
    raw = GameManager('CartPole-v1', cfg, seed=0)
    try:
        assert env.state_shape == (4,) and env.state_dtype == np.float32
        assert env.num_actions == 2 and not env.is_atari
        state = env.reset()
        np.testing.assert_array_equal(state, raw.reset())
        assert state.shape == (4,) and state.dtype == np.float32
        steps = 0
        for _ in range(200):
            state, reward, terminated, truncated = env.step(0)
            steps += 1
            obs = raw.step(0)[0]
            np.testing.assert_array_equal(state, obs)
            assert isinstance(reward, float) and reward == 1.0
            assert isinstance(terminated, bool) and isinstance(truncated, bool)
            if terminated:
                break
        assert terminated and not truncated and steps < 50
    finally:
        env.close()
        raw.close()


def test_truncation_is_reported():
    # Acrobot with zero torque hangs still and never reaches the goal: the 500-step time limit truncates it.
    env = Environment(make_cfg(ATARI_GAME='Acrobot-v1'), seed=0)
    try:
        env.reset()
        steps = 0
        for _ in range(600):
            _, reward, terminated, truncated = env.step(1)
            steps += 1
            assert reward == -1.0 and not terminated
            if truncated:
                break
        assert truncated and steps == 500
    finally:
        env.close()


def test_pong_reward_is_raw_and_episode_ends():
    # A point is scored within a few hundred steps; rewards are reported unclipped (+-1 in Pong).
    env = Environment(make_cfg(), seed=0)
    try:
        env.reset()
        rewards = [env.step(0)[1] for _ in range(300)]
        assert set(rewards) <= {-1.0, 0.0, 1.0} and -1.0 in rewards
    finally:
        env.close()


# ------------------------------------------------------------------------------------------------------- probe
def test_probe_environment():
    assert probe_environment(make_cfg()) == ((84, 84, 4), np.dtype(np.uint8), 6, True)
    assert probe_environment(make_cfg(ATARI_GAME='CartPole-v1', STACKED_FRAMES=4)) == \
        ((4,), np.dtype(np.float32), 2, False)
    assert probe_environment(make_cfg(ATARI_GAME='BreakoutDeterministic-v4', STACKED_FRAMES=2, IMAGE_WIDTH=64,
                                      IMAGE_HEIGHT=48)) == ((48, 64, 2), np.dtype(np.uint8), 4, True)


def test_agent_side_modules_do_not_import_torch():
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = 'import sys, ga3c.Environment, ga3c.GameManager; print("torch" in sys.modules)'
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, '-c', code], cwd=root, capture_output=True, text=True, check=True,
                         env={**os.environ, 'PYTHONPATH': str(root)})
    assert out.stdout.strip() == 'False'
