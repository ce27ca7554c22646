"""The first command learns where it runs: with the model on the CPU and no --config, the training command puts a
CPU preset (configs/cpu.toml for images, configs/classic.toml for vector observations) under the KEY=VALUE
arguments; the game is never the preset's; --config, play mode and a GPU keep Config.py's (the original's) values.

The expected values are read from the preset files with tomllib here, independently of ga3c's reader.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
import torch
from conftest import ORIGINAL, REPO, assert_accounted, latest_checkpoint, run_ga3c, summary, tagged_env, tail

from ga3c import settings
from ga3c.Config import Config
from ga3c.NetworkVP import resolve_precision
from ga3c.settings import config_to_dict, parse_settings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CUDA = torch.cuda.is_available()
NOTE = "the model runs on the CPU and no --config was given: using the CPU preset"


def preset(name: str) -> dict[str, object]:
    """A preset's keys and values, its [sections] flattened."""
    data = tomllib.loads((REPO / "configs" / name).read_text())
    return {k: v for table in data.values() for k, v in table.items()}


def assert_preset_under(cfg_values: dict, name: str, user: dict[str, object]) -> None:
    """Every key of the preset (but ATARI_GAME) took effect unless the user gave it; the user's keys won; every
    other key is Config.py's."""
    values = preset(name)
    for key in config_to_dict(Config()):
        if key in user:
            want = user[key]
        elif key in values and key != "ATARI_GAME":
            want = values[key]
        else:
            want = getattr(Config, key)
        assert cfg_values[key] == want, f"{key}: {cfg_values[key]!r}, expected {want!r}"


def parsed(argv: list[str], caplog) -> tuple[dict, str]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ga3c.settings"):
        cfg = parse_settings(argv, auto=True)
    return config_to_dict(cfg), caplog.text


# --- in-process: which preset, which keys -------------------------------------------------------------------------

def test_no_arguments_on_this_machine(caplog):
    values, text = parsed([], caplog)
    if CUDA:  # the model lands on the GPU: the original's values, no note
        assert values == config_to_dict(Config()) and NOTE not in text
        return
    assert_preset_under(values, "cpu.toml", {})
    assert values["ATARI_GAME"] == Config.ATARI_GAME  # the preset's game is not taken
    assert f"{NOTE} configs/cpu.toml" in text and "--config configs/pong.toml" in text


def test_device_cpu_asked_gets_the_cpu_preset_and_user_keys_win(caplog):
    user = {"DEVICE": "cpu", "AGENTS": 3, "LEARNING_RATE_START": 0.0005, "PRECISION": "fp32"}
    values, text = parsed([f"{k}={v}" for k, v in user.items()], caplog)
    assert_preset_under(values, "cpu.toml", user)
    assert text.count(NOTE) == 1


def test_vector_task_gets_the_classic_preset_but_keeps_its_game(caplog):
    user = {"ATARI_GAME": "Acrobot-v1", "DEVICE": "cpu", "TIME_MAX": 7}
    values, text = parsed([f"{k}={v}" for k, v in user.items()], caplog)
    assert preset("classic.toml")["ATARI_GAME"] != "Acrobot-v1"
    assert_preset_under(values, "classic.toml", user)
    assert f"{NOTE} configs/classic.toml" in text and "the game stays Acrobot-v1" in text


def test_a_gpu_that_is_not_there_counts_as_the_cpu(caplog):
    values, text = parsed(["ATARI_GAME=CartPole-v1", "DEVICE=gpu:0"], caplog)
    if CUDA:
        assert NOTE not in text and values["LEARNING_RATE_START"] == Config.LEARNING_RATE_START
    else:
        assert_preset_under(values, "classic.toml", {"ATARI_GAME": "CartPole-v1", "DEVICE": "gpu:0"})


@pytest.mark.parametrize("argv", [
    [*ORIGINAL, "DEVICE=cpu"],                                   # a preset chosen: only that one
    ["PLAY_MODE=True", "DEVICE=cpu", "ATARI_GAME=CartPole-v1"],   # play mode: the checkpoint decides
])
def test_no_auto_preset_with_a_config_or_in_play_mode(argv, caplog):
    values, text = parsed(argv, caplog)
    assert NOTE not in text
    assert values == config_to_dict(parse_settings(argv))  # the same as without the automatic step


def test_without_auto_nothing_changes(caplog):
    with caplog.at_level(logging.INFO, logger="ga3c.settings"):
        cfg = parse_settings(["DEVICE=cpu", "ATARI_GAME=CartPole-v1"])
    assert config_to_dict(cfg)["LEARNING_RATE_START"] == Config.LEARNING_RATE_START and NOTE not in caplog.text


def test_bad_values_fail_before_any_preset(caplog):
    from ga3c.errors import ConfigError

    with pytest.raises(ConfigError, match="AGENTS"):
        parsed(["DEVICE=cpu", "AGENTS=0"], caplog)
    with pytest.raises(ConfigError, match="NoSuchGame-v4"):
        parsed(["DEVICE=cpu", "ATARI_GAME=NoSuchGame-v4"], caplog)
    assert NOTE not in caplog.text


def test_missing_preset_warns_and_keeps_config_py(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(settings, "PRESETS", tmp_path)
    values, text = parsed(["DEVICE=cpu", "ATARI_GAME=CartPole-v1"], caplog)
    assert "the CPU preset configs/classic.toml is missing" in text
    assert values == config_to_dict(parse_settings(["DEVICE=cpu", "ATARI_GAME=CartPole-v1"]))


# --- real runs: the log lines and the settings the run used (from its checkpoint) ---------------------------------

def train(tmp_path: Path, tag: str, args: list[str]) -> tuple[str, dict]:
    rc, out, err = run_ga3c([*args, "MAX_STEPS=600", "SAVE_MODELS=True"], tmp_path, timeout=240, env=tagged_env(tag))
    assert rc == 0, f"exit status {rc}\nstdout:\n{tail(out)}\nstderr:\n{tail(err)}"
    assert_accounted(summary(err), err)
    return err, latest_checkpoint(tmp_path / "checkpoints")["settings"]


def test_first_command_on_this_machine(tmp_path, tag):
    """`./_train.sh` with no arguments (bar a stop condition): Pong with the CPU preset, said in the first lines."""
    err, used = train(tmp_path, tag, [])
    if CUDA:
        assert NOTE not in err and used["AGENTS"] == Config.AGENTS
        return
    first = err.splitlines()[:2]
    assert NOTE in first[0] and "configs/cpu.toml" in first[0], err[:2000]
    assert "--config configs/pong.toml" in first[1], err[:2000]
    assert_preset_under(used, "cpu.toml", {"MAX_STEPS": 600, "SAVE_MODELS": True})
    want = resolve_precision("auto", torch.device("cpu"))  # the preset's 'auto': bf16 where the CPU has it
    assert f"on cpu, {want} (PRECISION='auto'" in err, err[-2000:]  # the model line


def test_the_originals_settings_with_pong_toml(tmp_path, tag):
    user = {"AGENTS": 2, "DYNAMIC_SETTINGS": False, "DEVICE": "cpu"}
    err, used = train(tmp_path, tag, [*ORIGINAL, *(f"{k}={v}" for k, v in user.items())])
    assert NOTE not in err
    pong = preset("pong.toml")
    for key, value in used.items():
        want = user.get(key, pong.get(key, getattr(Config, key)))
        if key not in ("MAX_STEPS", "SAVE_MODELS"):
            assert value == want, f"{key}: {value!r}, expected {want!r}"
    assert used["LEARNING_RATE_START"] == 0.0003 and used["ENVS_PER_AGENT"] == 1 and used["PRECISION"] == "fp32"


def test_user_keys_win_in_a_real_run_and_play_is_untouched(tmp_path, tag):
    user = {"ATARI_GAME": "Acrobot-v1", "AGENTS": 2, "LEARNING_RATE_START": 0.002}
    err, used = train(tmp_path, tag, [f"{k}={v}" for k, v in user.items()])
    if not CUDA:
        assert NOTE in err and "configs/classic.toml" in err
        assert_preset_under(used, "classic.toml", {**user, "MAX_STEPS": 600, "SAVE_MODELS": True})
    # play mode with no --config: no preset note; it plays the checkpoint this run saved
    rc, out, perr = run_ga3c(["PLAY_MODE=True", "ATARI_GAME=Acrobot-v1", "PLAY_EPISODES=1", "VIDEO_PATH=play.mp4"],
                             tmp_path, timeout=180, env=tagged_env(tag))
    assert rc == 0, f"exit status {rc}\n{tail(perr)}"
    assert NOTE not in perr
    assert "(mean +- std over 1 episode" in out, out
