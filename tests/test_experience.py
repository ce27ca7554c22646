"""n-step returns and reward clipping against values computed by hand (written as literals below)."""

import numpy as np
import pytest

from ga3c.Experience import clip_reward, n_step_returns


def returns(rewards, values=None, bootstrap=0.0, discount=0.9, terminated=(), truncated=(), lam=1.0):
    """n_step_returns of one environment: lists in, a 1-D array out (terminated/truncated list step indices)."""
    steps = len(rewards)
    col = lambda xs: np.asarray(xs, dtype=np.float32).reshape(steps, 1)  # noqa: E731
    term = np.zeros((steps, 1), dtype=bool)
    trunc = np.zeros((steps, 1), dtype=bool)
    term[list(terminated), 0] = True
    trunc[list(truncated), 0] = True
    out = n_step_returns(col(rewards), term, trunc, col(values if values is not None else [0.0] * steps),
                         np.array([bootstrap], dtype=np.float32), discount, lam)
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


# --- generalised advantage estimation (GAE_LAMBDA < 1) ------------------------------------------------------------

def lam_returns(rewards, values, bootstrap, lam, discount=0.9, terminated=(), truncated=()):
    return returns(rewards, values, bootstrap, discount, terminated, truncated, lam)


@pytest.mark.parametrize("terminated, truncated, advantages", [
    # delta_2 = 1 + 0.9*2 + 0.5 = 3.3;  delta_1 = 0 + 0.9*(-0.5) - 1 = -1.45;  delta_0 = 1 + 0.9*1 - 0.5 = 1.4
    # A_2 = 3.3;  A_1 = -1.45 + 0.45*3.3 = 0.035;  A_0 = 1.4 + 0.45*0.035 = 1.41575
    ((), (), [1.41575, 0.035, 3.3]),
    # terminal at step 1: delta_1 = 0 - 1 = -1, the sum stops there;  A_0 = 1.4 + 0.45*(-1) = 0.95
    ((1,), (), [0.95, -1.0, 3.3]),
    # cut by a time limit at step 1: V(s_1) stands for the lost next state: delta_1 = 0.9*1 - 1 = -0.1, the sum
    # stops there;  A_0 = 1.4 + 0.45*(-0.1) = 1.355
    ((), (1,), [1.355, -0.1, 3.3]),
])
def test_gae_by_hand(terminated, truncated, advantages):
    values = [0.5, 1.0, -0.5]
    got = lam_returns([1, 0, 1], values, 2.0, 0.5, terminated=terminated, truncated=truncated)
    np.testing.assert_allclose(got - np.float32(values), advantages, rtol=1e-5, atol=1e-6)


def paper_gae(rewards, values, bootstrap, terminated, truncated, gamma, lam):
    """GAE from its definition (Schulman et al. 2016, eq. 16): A_t = sum_l (gamma*lam)^l delta_{t+l}, the sum
    running to the end of the episode or of the rollout, delta_k = r_k + gamma * V_next(k) - V(s_k)."""
    steps, envs = rewards.shape
    out = np.zeros((steps, envs))
    for e in range(envs):
        delta = np.zeros(steps)
        for k in range(steps):
            if terminated[k, e]:
                v_next = 0.0
            elif truncated[k, e]:
                v_next = values[k, e]
            elif k == steps - 1:
                v_next = bootstrap[e]
            else:
                v_next = values[k + 1, e]
            delta[k] = rewards[k, e] + gamma * v_next - values[k, e]
        for t in range(steps):
            for k in range(t, steps):
                out[t, e] += (gamma * lam) ** (k - t) * delta[k]
                if terminated[k, e] or truncated[k, e]:
                    break
    return out


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.95, 1.0])
def test_gae_matches_its_definition_on_random_rollouts(lam):
    rng = np.random.default_rng(int(lam * 100))
    steps, envs, gamma = 12, 5, 0.97
    rewards = rng.uniform(-1, 1, (steps, envs)).astype(np.float32)
    values = rng.normal(0, 2, (steps, envs)).astype(np.float32)
    bootstrap = rng.normal(0, 2, envs).astype(np.float32)
    terminated = rng.random((steps, envs)) < 0.15
    truncated = (rng.random((steps, envs)) < 0.15) & ~terminated
    got = n_step_returns(rewards, terminated, truncated, values, bootstrap, gamma, lam)
    ref = paper_gae(rewards, values, bootstrap, terminated, truncated, gamma, lam)
    np.testing.assert_allclose(got - values, ref, rtol=1e-5, atol=1e-5)
    if lam == 0.0:  # one-step TD: the target is r + gamma * V_next
        np.testing.assert_allclose(got[:-1][~(terminated | truncated)[:-1]],
                                   (rewards[:-1] + gamma * values[1:])[~(terminated | truncated)[:-1]], rtol=1e-6)


def test_gae_lambda_one_is_the_n_step_returns_to_the_bit():
    rng = np.random.default_rng(3)
    steps, envs = 9, 4
    rewards = rng.uniform(-1, 1, (steps, envs)).astype(np.float32)
    values = rng.normal(0, 2, (steps, envs)).astype(np.float32)
    bootstrap = rng.normal(0, 2, envs).astype(np.float32)
    terminated = rng.random((steps, envs)) < 0.2
    truncated = (rng.random((steps, envs)) < 0.2) & ~terminated
    base = n_step_returns(rewards, terminated, truncated, values, bootstrap, 0.99)
    np.testing.assert_array_equal(n_step_returns(rewards, terminated, truncated, values, bootstrap, 0.99, 1.0), base)
    assert not np.allclose(n_step_returns(rewards, terminated, truncated, values, bootstrap, 0.99, 0.9), base)
