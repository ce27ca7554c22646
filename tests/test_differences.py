"""The original's behaviours that docs/differences.md offers as settings (EPISODE_START='noop', FRAME_RESCALE,
RESIZE_INTERPOLATION='pillow'), checked on real ALE frames against the original's procedure computed here with a raw
gymnasium env and numpy; and the results.txt number format."""

import cv2
import gymnasium as gym
import numpy as np
import pytest

from ga3c.Config import Config
from ga3c.Environment import Environment
from ga3c.errors import ConfigError
from ga3c.GameManager import resolve_game_id
from ga3c.settings import help_text, parse_settings


def make_cfg(**overrides):
    cfg = Config()
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def raw_pong(seed, obs_type='grayscale'):
    """Today's env for the original's PongDeterministic id, made and seeded directly (not through ga3c)."""
    env = gym.make('ALE/Pong-v5', frameskip=4, repeat_action_probability=0.25, obs_type=obs_type,
                   full_action_space=False)
    obs, _ = env.reset(seed=seed)
    return env, obs


def linear(frame, h=84, w=84):
    return cv2.resize(frame, (w, h), interpolation=cv2.INTER_LINEAR)


def original_state(queue):
    """The original's state from its frame queue: `np.transpose(np.array(queue), [1, 2, 0])`, (H, W, frames)."""
    return np.transpose(np.array(queue), [1, 2, 0])


# ------------------------------------------------------------------------------------------------ episode start
@pytest.mark.parametrize('stacked', [4, 3, 2, 1])  # 3: the stack that is not one integer a pixel
def test_noop_start_is_the_originals_frame_queue(stacked):
    # The original: reset pushes the reset frame into a queue of STACKED_FRAMES; its state is None until a step
    # (so at least one), and each step(0) pushes one frame; the first state is the full queue, oldest first.
    seed = 21
    cfg = make_cfg(EPISODE_START='noop', STACKED_FRAMES=stacked, REPEAT_ACTION_PROBABILITY=0.25)
    env = Environment(cfg, seed=seed)
    raw, obs = raw_pong(seed)
    try:
        queue = [linear(obs)]
        noops = 0
        while True:
            obs = raw.step(0)[0]
            noops += 1
            queue = (queue + [linear(obs)])[-stacked:]
            if len(queue) == stacked:
                break
        assert noops == max(1, stacked - 1)
        state = env.reset()
        np.testing.assert_array_equal(state, original_state(queue))
        # the emulator is where the original's agent took its first decision: 4 frames per no-op
        ale = env.game.env.unwrapped.ale
        assert ale.getEpisodeFrameNumber() == 4 * noops == raw.unwrapped.ale.getEpisodeFrameNumber()
        # and the two stay in step (sticky actions draw from the seeded emulator: any extra step would show)
        for a in np.random.default_rng(2).integers(0, 6, 40):
            state, reward, terminated, truncated = env.step(int(a))
            obs, raw_reward, raw_term, raw_trunc, _ = raw.step(int(a))
            queue = (queue + [linear(obs)])[-stacked:]
            np.testing.assert_array_equal(state, original_state(queue))
            assert (reward, terminated, truncated) == (raw_reward, raw_term, raw_trunc)
        # a second episode starts the same way, and its no-op rewards are not in the episode's score
        state = env.reset()
        assert env.total_reward == 0.0 and ale.getEpisodeFrameNumber() == 4 * noops
    finally:
        env.close()
        raw.close()


def test_repeat_start_is_the_reset_frame_without_a_step():
    env = Environment(make_cfg(), seed=21)
    raw, obs = raw_pong(21)
    try:
        state = env.reset()
        np.testing.assert_array_equal(state, original_state([linear(obs)] * 4))
        assert env.game.env.unwrapped.ale.getEpisodeFrameNumber() == 0
    finally:
        env.close()
        raw.close()


# ---------------------------------------------------------------------------------------------- frame rescaling
def stretch(gray):
    """scipy.misc.bytescale as imresize applied it to a float frame, written out."""
    low, high = gray.min(), gray.max()
    span = high - low if high > low else 1.0
    return np.floor(np.clip((gray - low) * 255.0 / span, 0, 255) + 0.5).astype(np.uint8)


def triangle_weights(n_in, n_out):
    """Pillow's BILINEAR when shrinking: a triangle filter of half-width `scale` input pixels around each output
    pixel's centre, normalised; [n_out, n_in]."""
    scale = n_in / n_out
    support = max(scale, 1.0)
    centres = (np.arange(n_out) + 0.5) * scale
    x = np.arange(n_in) + 0.5
    w = np.clip(1.0 - np.abs(x[None, :] - centres[:, None]) / support, 0.0, None)
    return w / w.sum(axis=1, keepdims=True)


def original_frames(raw, first, actions, h, w):
    """The original's _preprocess of each frame: float gray of the RGB screen, stretched, then bilinear."""
    wv, wh = triangle_weights(210, h), triangle_weights(160, w)
    out = []
    for obs in [first] + [raw.step(int(a))[0] for a in actions]:
        gray = np.dot(obs[..., :3].astype(np.float64), [0.299, 0.587, 0.114])
        out.append((stretch(gray), wv @ stretch(gray).astype(np.float64) @ wh.T))
    return out


@pytest.mark.parametrize('h, w', [(84, 84), (48, 64)])
def test_rescale_and_pillow_are_the_originals_imresize(h, w):
    seed = 5
    actions = np.random.default_rng(3).integers(0, 6, 30)
    cfg = make_cfg(FRAME_RESCALE=True, RESIZE_INTERPOLATION='pillow', IMAGE_HEIGHT=h, IMAGE_WIDTH=w,
                   REPEAT_ACTION_PROBABILITY=0.25)
    env = Environment(cfg, seed=seed)
    raw, first = raw_pong(seed, 'rgb')
    try:
        expected = original_frames(raw, first, actions, h, w)
        got = [env.reset()[..., -1].copy()] + [env.step(int(a))[0][..., -1].copy() for a in actions]
    finally:
        env.close()
        raw.close()
    diffs = np.array([g.astype(int) - np.floor(ref + 0.5).astype(int) for g, (_, ref) in
                      zip(got, expected, strict=True)])
    # Pillow works in 8-bit fixed point, rounding after each of its two passes: at most one gray level apart
    assert np.abs(diffs).max() <= 1
    assert (diffs == 0).mean() > 0.99
    # the stretch reached the resize: every stretched screen spans 0..255 although Pong's gray levels do not
    assert all(s.min() == 0 and s.max() == 255 for s, _ in expected)
    assert max(int(g.max()) for g in got) > 240


def test_rescale_alone_is_exact_before_an_opencv_resize():
    seed = 8
    actions = np.random.default_rng(4).integers(0, 6, 20)
    env = Environment(make_cfg(FRAME_RESCALE=True, REPEAT_ACTION_PROBABILITY=0.25), seed=seed)
    raw, obs = raw_pong(seed, 'rgb')
    try:
        for i, a in enumerate([None] + list(actions)):
            state = env.reset() if a is None else env.step(int(a))[0]
            if a is not None:
                obs = raw.step(int(a))[0]
            gray = np.dot(obs.astype(np.float64), [0.299, 0.587, 0.114])
            np.testing.assert_array_equal(state[..., -1], linear(stretch(gray)), err_msg=f'frame {i}')
    finally:
        env.close()
        raw.close()


def test_uniform_frame_stretches_to_zero():
    from ga3c.Environment import min_max_stretch

    np.testing.assert_array_equal(min_max_stretch(np.full((3, 4), 87.3)), np.zeros((3, 4), np.uint8))
    ramp = np.array([[10.0, 10.5, 12.0, 30.0]])
    np.testing.assert_array_equal(min_max_stretch(ramp), stretch(ramp))
    assert min_max_stretch(ramp).tolist() == [[0, 6, 26, 255]]  # 0.5 * 255 / 20 = 6.375; 2 * 255 / 20 = 25.5


def test_rescale_asks_ale_for_the_rgb_screen():
    _, kwargs, _ = resolve_game_id('PongDeterministic-v0', make_cfg(FRAME_RESCALE=True))
    assert kwargs['obs_type'] == 'rgb'
    _, kwargs, _ = resolve_game_id('Pong-ramDeterministic-v4', make_cfg(FRAME_RESCALE=True))
    assert kwargs['obs_type'] == 'ram'


# ------------------------------------------------------------------------------------------------------ settings
def test_settings_accept_and_reject_the_new_values():
    cfg = parse_settings(['EPISODE_START=noop', 'FRAME_RESCALE=yes', 'RESIZE_INTERPOLATION=pillow'])
    assert (cfg.EPISODE_START, cfg.FRAME_RESCALE, cfg.RESIZE_INTERPOLATION) == ('noop', True, 'pillow')
    assert (Config.EPISODE_START, Config.FRAME_RESCALE, Config.RESIZE_INTERPOLATION) == ('repeat', False, 'linear')
    for arg, key in (('EPISODE_START=noops', 'EPISODE_START'), ('FRAME_RESCALE=maybe', 'FRAME_RESCALE'),
                     ('RESIZE_INTERPOLATION=bilinear', 'RESIZE_INTERPOLATION')):
        with pytest.raises(ConfigError) as err:
            parse_settings([arg])
        assert str(err.value).startswith(f'bad value for {key}: ')
    text = help_text()
    assert "EPISODE_START='repeat'" in text and 'FRAME_RESCALE=False' in text and "'pillow'" in text


# ---------------------------------------------------------------------------------------------------- results.txt
def test_results_line_keeps_whole_scores_whole():
    from datetime import datetime

    from ga3c.ProcessStats import results_line

    when = datetime(2026, 1, 2, 3, 4, 5).timestamp()
    assert results_line(when, -21.0, 812) == '2026-01-02 03:04:05, -21, 812\n'
    assert results_line(when, 1234567.0, 5) == '2026-01-02 03:04:05, 1234567, 5\n'
    assert results_line(when, 0.1 + 0.2, 5) == '2026-01-02 03:04:05, 0.3, 5\n'
    assert results_line(when, -2.5, 5) == '2026-01-02 03:04:05, -2.5, 5\n'


def test_play_takes_frame_rescale_from_the_checkpoint():
    # the network was trained on stretched (or unstretched) frames: play must feed it the same
    from ga3c.Player import Player

    player = Player(make_cfg(PLAY_MODE=True))
    player._adopt_settings({'settings': {'FRAME_RESCALE': True, 'RESIZE_INTERPOLATION': 'pillow'}})
    assert player.cfg.FRAME_RESCALE is True and player.cfg.RESIZE_INTERPOLATION == 'pillow'
    assert Config.FRAME_RESCALE is False
