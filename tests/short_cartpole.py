"""CartPole-v1 cut by a time limit of 15 steps, for tests that need episodes ended by a time limit as well as
terminal ones. A spawned agent imports it through the `module:EnvId` form of ATARI_GAME (SHORT_CARTPOLE)."""

import gymnasium as gym

ENV_ID = "ga3c-test/ShortCartPole-v1"
SHORT_CARTPOLE = f"short_cartpole:{ENV_ID}"

if ENV_ID not in gym.envs.registry:
    gym.register(id=ENV_ID, entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=15)
