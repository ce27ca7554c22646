"""Environments from other packages: gymnasium's `module:EnvId` form of ATARI_GAME (popgym, MiniGrid and a user's
own module, imported in every process that makes the env) and envs whose constructor takes no render_mode."""

from __future__ import annotations

import subprocess
import textwrap

import numpy as np
import pytest
from conftest import CPU, PYTHON, REPO, latest_checkpoint, result_lines, run_ga3c, summary, tagged_env

from ga3c.Config import Config
from ga3c.errors import ConfigError
from ga3c.GameManager import GameManager, resolve_game_id

REPEAT_PREVIOUS = "popgym:popgym-RepeatPreviousEasy-v0"

# A user's module: registers My-v0, an env whose constructor takes no render_mode, and notes in made.txt (beside
# the module) the pid of each process that makes one and whether that process was spawned by another.
USER_MODULE = '''
    import multiprocessing
    import os

    import gymnasium as gym


    class My(gym.Env):
        """Reward 1 for an action equal to the bit just shown; 20 steps an episode."""

        def __init__(self):
            self.observation_space = gym.spaces.Discrete(2)
            self.action_space = gym.spaces.Discrete(2)
            with open(os.path.join(os.path.dirname(__file__), "made.txt"), "a") as f:
                f.write(f"{os.getpid()} {multiprocessing.parent_process() is not None}\\n")

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t, self.bit = 0, int(self.np_random.integers(2))
            return self.bit, {}

        def step(self, action):
            reward = float(action == self.bit)
            self.t, self.bit = self.t + 1, int(self.np_random.integers(2))
            return self.bit, reward, self.t >= 20, False, {}


    gym.register("My-v0", entry_point=My)
'''


def test_module_form_imports_the_module_and_resolves_to_its_id():
    # A fresh interpreter: nothing has imported popgym or minigrid before resolve_game_id does.
    code = textwrap.dedent('''
        import sys
        from ga3c.Config import Config
        from ga3c.GameManager import resolve_game_id
        before = [m in sys.modules for m in ("popgym", "minigrid")]
        ids = [resolve_game_id(g, Config())[0] for g in ("popgym:popgym-RepeatPreviousEasy-v0",
                                                          "minigrid:MiniGrid-MemoryS7-v0")]
        print(before, [m in sys.modules for m in ("popgym", "minigrid")], ids)
    ''')
    out = subprocess.run([PYTHON, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[False, False] [True, True] ['popgym-RepeatPreviousEasy-v0', 'MiniGrid-MemoryS7-v0']"


def test_module_form_keeps_original_ids_and_ale_settings():
    gym_id, kwargs, note = resolve_game_id("ale_py:PongDeterministic-v4", Config())
    assert (gym_id, kwargs["frameskip"], kwargs["obs_type"]) == ("ALE/Pong-v5", 4, "grayscale")
    assert note.startswith("PongDeterministic-v4 is ALE/Pong-v5")


@pytest.mark.parametrize("game_id, message", [
    ("popgymm:popgym-RepeatPreviousEasy-v0", "ATARI_GAME='popgymm:popgym-RepeatPreviousEasy-v0': there is no "
     "module 'popgymm'; did you mean 'popgym'? install the package that provides it (pip install popgymm) or check "
     "the name before the colon"),
    ("minigrid:MiniGrid-MemoryS77-v0", "ATARI_GAME='minigrid:MiniGrid-MemoryS77-v0': module 'minigrid' registers "
     "no 'MiniGrid-MemoryS77-v0'; did you mean 'MiniGrid-MemoryS7-v0'? (or 'MiniGrid-MemoryS9-v0', "
     "'MiniGrid-MemoryS11-v0') check the id after the colon"),
    ("popgym:", "ATARI_GAME='popgym:': the module:EnvId form needs both parts, e.g. "
     "popgym:popgym-RepeatPreviousEasy-v0"),
])
def test_module_form_errors_name_the_fix(game_id, message):
    with pytest.raises(ConfigError) as err:
        resolve_game_id(game_id, Config())
    assert str(err.value) == message


def test_module_whose_import_fails_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "needs_more.py").write_text("import no_such_dependency_here\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('cannot start\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as err:
        resolve_game_id("needs_more:X-v0", Config())
    assert str(err.value) == ("ATARI_GAME='needs_more:X-v0': importing module 'needs_more' failed, it needs "
                              "'no_such_dependency_here': install it (pip install no_such_dependency_here)")
    with pytest.raises(ConfigError) as err:
        resolve_game_id("raises:X-v0", Config())
    assert str(err.value) == ("ATARI_GAME='raises:X-v0': importing module 'raises' failed (RuntimeError: cannot "
                              "start); fix or reinstall that package")


def test_env_without_render_mode_argument():
    # popgym's RepeatPrevious.__init__ takes no render_mode: made without one, and asking for frames says why not.
    game = GameManager(REPEAT_PREVIOUS, Config(), seed=0)
    try:
        assert game.render() is None
        obs = game.reset()
        assert 0 <= int(obs) < 4
    finally:
        game.close()
    game = GameManager(REPEAT_PREVIOUS, Config(), seed=0, render_mode="rgb_array")
    try:
        game.reset()
        with pytest.raises(ConfigError, match=r"^it has no 'rgb_array' render mode; its render modes: none$"):
            game.render()
    finally:
        game.close()
    # an env that has the mode still renders
    game = GameManager("popgym:popgym-PositionOnlyCartPoleEasy-v0", Config(), seed=0, render_mode="rgb_array")
    try:
        game.reset()
        frame = game.render()
        assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    finally:
        game.close()


def test_user_module_is_imported_in_the_spawned_agents(tmp_path):
    (tmp_path / "mymod.py").write_text(textwrap.dedent(USER_MODULE))
    env = tagged_env("user-module", {"PYTHONPATH": f"{REPO}:{tmp_path}"})
    rc, out, err = run_ga3c(["ATARI_GAME=mymod:My-v0", *CPU, "AGENTS=2", "MAX_STEPS=400", "SAVE_MODELS=False"],
                            tmp_path, timeout=180, env=env)
    assert rc == 0, err[-3000:]
    s = summary(err)
    assert s["steps"] >= 400 and s["lost"] == 0
    # 20 steps an episode; when the run stops, each of the 2 agents may be inside an unfinished one
    assert len(result_lines(tmp_path / "results.txt")) == s["episodes"] >= s["steps"] // 20 - 2
    made = [line.split() for line in (tmp_path / "made.txt").read_text().splitlines()]
    spawned = {pid for pid, child in made if child == "True"}
    assert len(spawned) == 2, made  # each agent process imported mymod and made its env
    assert [child for _, child in made].count("False") == 1, made  # the main process probed it once


def test_popgym_trains_then_plays_without_a_screen(tmp_path):
    """RepeatPrevious (no render_mode argument, no render mode): a short run, then play mode plays it without a
    video (one warning), and VIDEO_PATH, which cannot be recorded, is one error line."""
    base = [f"ATARI_GAME={REPEAT_PREVIOUS}", *CPU]
    rc, out, err = run_ga3c([*base, "AGENTS=2", "MAX_STEPS=400"], tmp_path, timeout=180)
    assert rc == 0, err[-3000:]
    s = summary(err)
    assert s["steps"] >= 400 and s["lost"] == 0 and s["produced"] == s["trained"] + s["dropped"]
    scores = [float(line.split(", ")[1]) for line in result_lines(tmp_path / "results.txt")]
    assert len(scores) == s["episodes"] >= 5 and all(-1.0 <= x <= 1.0 for x in scores)
    assert list((tmp_path / "checkpoints").glob("network_*.pt"))

    rc, out, err = run_ga3c([*base, "PLAY_MODE=True", "PLAY_EPISODES=2"], tmp_path, timeout=120)
    assert rc == 0, err[-3000:]
    warnings = [line for line in err.splitlines() if "cannot be rendered here" in line]
    assert len(warnings) == 1 and "it has no 'rgb_array' render mode" in warnings[0], err
    assert [line.split(",")[1].strip() for line in out.splitlines() if line.startswith("episode ")] == \
        ["length 51 steps"] * 2  # 52 cards: one shown at reset, then one a step
    assert not (tmp_path / "play.mp4").exists()

    rc, out, err = run_ga3c([*base, "PLAY_MODE=True", "PLAY_EPISODES=1", "VIDEO_PATH=v.mp4"], tmp_path, timeout=120)
    errors = [line for line in err.splitlines() if line.startswith("ga3c: error: ")]
    assert rc == 2 and "Traceback" not in err and len(errors) == 1, err
    assert errors[0].endswith("so VIDEO_PATH cannot be recorded: leave VIDEO_PATH empty")


@pytest.mark.parametrize("game, state_size", [
    ("popgym:popgym-CountRecallEasy-v0", 4),  # MultiDiscrete([2 2]): two one-hots
    ("minigrid:MiniGrid-MemoryS7-v0", 4 + 7 * 7 * 3),  # Dict: direction one-hot, grid code; fixed mission left out
])
def test_short_feed_forward_run_on_encoded_observations(tmp_path, game, state_size):
    rc, out, err = run_ga3c([f"ATARI_GAME={game}", *CPU, "AGENTS=2", "MAX_STEPS=500"], tmp_path, timeout=180)
    assert rc == 0, err[-3000:]
    s = summary(err)
    assert s["steps"] >= 500 and s["lost"] == 0 and s["produced"] == s["trained"] + s["dropped"]
    assert s["updates"] > 0
    assert len(result_lines(tmp_path / "results.txt")) == s["episodes"] >= 1
    assert latest_checkpoint(tmp_path / "checkpoints")["meta"]["state_shape"] == [state_size]


def test_user_module_is_imported_in_a_ray_agent_group(tmp_path):
    """A Ray agent group (an actor in a Ray worker process, not a spawned child) imports the user's module when it
    makes its environments, and rolls out on them."""
    pytest.importorskip("ray")
    (tmp_path / "mymod.py").write_text(textwrap.dedent(USER_MODULE))
    code = textwrap.dedent('''
        import os, ray, torch
        from ga3c.NetworkVP import NetworkVP
        from ga3c.ray_cluster import AgentGroup
        from ga3c.settings import parse_settings
        cfg = parse_settings(["ATARI_GAME=mymod:My-v0", "CLUSTER_ENVS_PER_GROUP=3", "TIME_MAX=5"])
        ray.init(num_cpus=1, include_dashboard=False, object_store_memory=100 * 2**20, log_to_driver=False)
        group = ray.remote(num_cpus=1)(AgentGroup).remote(cfg, 0, 1, (2,), 2)
        weights = {k: v.numpy() for k, v in NetworkVP(cfg, (2,), 2, torch.device("cpu")).get_state()["model"].items()}
        out = ray.get(group.rollout.remote(weights, 1))
        print("rollout", out["states"].shape, out["rewards"].shape)
        print("driver", os.getpid())
        ray.shutdown()
    ''')
    env = tagged_env("ray-user-module", {"PYTHONPATH": f"{REPO}:{tmp_path}"})
    proc = subprocess.run([PYTHON, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rollout (6, 3, 2) (5, 3)" in proc.stdout
    made = [line.split() for line in (tmp_path / "made.txt").read_text().splitlines()]
    assert len(made) == 3 and len({pid for pid, _ in made}) == 1, made  # the group's 3 envs, in its worker
    driver = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("driver ")]
    assert driver and made[0][0] != driver[0], (made, driver)
