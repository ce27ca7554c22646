"""n-step returns and reward clipping against values computed by hand (written as literals below)."""

import numpy as np
import pytest

from ga3c.Experience import clip_reward, n_step_returns


def returns(rewards, values=None, bootstrap=0.0, discount=0.9, terminated=(), truncated=()):
    """n_step_returns of one environment: lists in, a 1-D array out (terminated/truncated list step indices)."""
    steps = len(rewards)
    col = lambda xs: np.asarray(xs, dtype=np.float32).reshape(steps, 1)  # noqa: E731
    term = np.zeros((steps, 1), dtype=bool)
    trunc = np.zeros((steps, 1), dtype=bool)
    term[list(terminated), 0] = True
    trunc[list(truncated), 0] = True
    out = n_step_returns(col(rewards), term, trunc, col(values if values is not None else [0.0] * steps),
                         np.array([bootstrap], dtype=np.float32), discount)
    assert out.shape == (steps, 1)
    assert out.dtype == np.float32
    return out[:, 0]


def test_bootstrap_from_the_value_after_the_rollout():
    # R2 = 1 + 0.9*2 = 2.8;  R1 = 0 + 0.9*2.8 = 2.52;  R0 = 1 + 0.9*2.52 = 3.268
    np.testing.assert_allclose(returns([1, 0, 1], bootstrap=2.0), [3.268, 2.52, 2.8], rtol=1e-6)


def test_values_of_the_steps_do_not_matter_without_truncation():
    got = returns([1, 0, 1], values=[100.0, -50.0, 7.0], bootstrap=2.0)
    np.testing.assert_allclose(got, [3.268, 2.52, 2.8], rtol=1e-6)


def test_terminal_at_the_last_step_ignores_the_bootstrap_and_keeps_its_reward():
    # R2 = 1 (terminal, its reward trained on);  R1 = 0 + 0.9*1 = 0.9;  R0 = 1 + 0.9*0.9 = 1.81
    np.testing.assert_allclose(returns([1, 0, 1], bootstrap=2.0, terminated=[2]), [1.81, 0.9, 1.0], rtol=1e-6)


def test_terminal_in_the_middle_restarts_the_chain():
    # gamma 0.5, bootstrap 10, terminal at t=1:
    # R3 = 4 + 0.5*10 = 9;  R2 = 3 + 0.5*9 = 7.5;  R1 = 2 (the next episode's 7.5 not added);  R0 = 1 + 0.5*2 = 2
    got = returns([1, 2, 3, 4], bootstrap=10.0, discount=0.5, terminated=[1])
    np.testing.assert_allclose(got, [2.0, 2.0, 7.5, 9.0], rtol=1e-6)


def test_terminal_at_the_first_step():
    # R2 = -1 + 0.5*4 = 1;  R1 = 1 + 0.5*1 = 1.5;  R0 = 1 (terminal)
    got = returns([1, 1, -1], bootstrap=4.0, discount=0.5, terminated=[0])
    np.testing.assert_allclose(got, [1.0, 1.5, 1.0], rtol=1e-6)


def test_truncated_step_restarts_from_its_own_value():
    # gamma 0.5, bootstrap 10, values V(s_t) = [0.5, 3, 0.7, 0.9], truncated at t=1:
    # R3 = 4 + 0.5*10 = 9;  R2 = 3 + 0.5*9 = 7.5;  R1 = 2 + 0.5*V(s_1) = 2 + 1.5 = 3.5;  R0 = 1 + 0.5*3.5 = 2.75
    got = returns([1, 2, 3, 4], values=[0.5, 3.0, 0.7, 0.9], bootstrap=10.0, discount=0.5, truncated=[1])
    np.testing.assert_allclose(got, [2.75, 3.5, 7.5, 9.0], rtol=1e-6)


def test_truncated_at_the_last_step_ignores_the_bootstrap():
    # R2 = 1 + 0.9*V(s_2) = 1 + 0.9*5 = 5.5;  R1 = 0 + 0.9*5.5 = 4.95;  R0 = 1 + 0.9*4.95 = 5.455
    got = returns([1, 0, 1], values=[0.0, 0.0, 5.0], bootstrap=2.0, truncated=[2])
    np.testing.assert_allclose(got, [5.455, 4.95, 5.5], rtol=1e-6)


def test_terminal_wins_over_truncated_at_the_same_step():
    got = returns([1, 0, 1], values=[0.0, 0.0, 5.0], bootstrap=2.0, terminated=[2], truncated=[2])
    np.testing.assert_allclose(got, [1.81, 0.9, 1.0], rtol=1e-6)


def test_single_step_rollout():
    # R0 = 0.5 + 0.99*(-2) = -1.48
    np.testing.assert_allclose(returns([0.5], bootstrap=-2.0, discount=0.99), [-1.48], rtol=1e-6)


def test_several_environments_are_independent_columns():
    # T=4, E=3, gamma 0.5; column 0: plain bootstrap 10; column 1: terminal at t=1, bootstrap 10;
    # column 2: truncated at t=2 with V(s_2) = 6, bootstrap -4.
    rewards = np.array([[1, 1, 0], [2, 2, 0], [3, 3, 1], [4, 4, 0]], dtype=np.float32)
    values = np.array([[0, 0, 0], [0, 0, 0], [0, 0, 6], [0, 0, 0]], dtype=np.float32)
    terminated = np.zeros((4, 3), dtype=bool)
    truncated = np.zeros((4, 3), dtype=bool)
    terminated[1, 1] = True
    truncated[2, 2] = True
    bootstrap = np.array([10, 10, -4], dtype=np.float32)
    out = n_step_returns(rewards, terminated, truncated, values, bootstrap, 0.5)
    assert out.shape == (4, 3)
    assert out.dtype == np.float32
    # column 0: R3 = 4 + 5 = 9; R2 = 3 + 4.5 = 7.5; R1 = 2 + 3.75 = 5.75; R0 = 1 + 2.875 = 3.875
    # column 1: R3 = 9; R2 = 7.5; R1 = 2 (terminal); R0 = 1 + 1 = 2
    # column 2: R3 = 0 + 0.5*(-4) = -2; R2 = 1 + 0.5*6 = 4 (truncated); R1 = 0 + 2 = 2; R0 = 0 + 1 = 1
    expected = np.array([[3.875, 2.0, 1.0], [5.75, 2.0, 2.0], [7.5, 7.5, 4.0], [9.0, 9.0, -2.0]])
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    # the inputs are not modified
    assert bootstrap.tolist() == [10, 10, -4]
    assert rewards[0].tolist() == [1, 1, 0]


def test_discount_one_and_zero():
    # gamma 1: plain sums to the end, plus the bootstrap: [1+0+1+2, 0+1+2, 1+2]
    np.testing.assert_allclose(returns([1, 0, 1], bootstrap=2.0, discount=1.0), [4.0, 3.0, 3.0])
    # gamma 0: the rewards themselves
    np.testing.assert_allclose(returns([1, 0, 1], bootstrap=2.0, discount=0.0), [1.0, 0.0, 1.0])


@pytest.mark.parametrize("reward, low, high, expected", [
    (5.0, -1.0, 1.0, 1.0),
    (-3.0, -1.0, 1.0, -1.0),
    (0.5, -1.0, 1.0, 0.5),
    (-0.25, -1.0, 1.0, -0.25),
    (1.0, -1.0, 1.0, 1.0),
    (-1.0, -1.0, 1.0, -1.0),
    (0.0, -1.0, 1.0, 0.0),
    (21.0, -2.0, 3.0, 3.0),
    (-21.0, -2.0, 3.0, -2.0),
    (2.5, -2.0, 3.0, 2.5),
    (7, 0, 5, 5.0),
])
def test_clip_reward(reward, low, high, expected):
    got = clip_reward(reward, low, high)
    assert got == expected
    assert type(got) is float


def test_clip_reward_accepts_numpy_scalars():
    got = clip_reward(np.float64(4.0), -1.0, 1.0)
    assert got == 1.0 and type(got) is float
    assert clip_reward(np.int64(-7), -1.0, 1.0) == -1.0
