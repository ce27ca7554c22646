"""Play mode (ga3c/Player.py): real ALE, real `python -m ga3c PLAY_MODE=True` processes, checkpoints from a real
training run (made once per module) or built directly with NetworkVP + save_checkpoint."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from conftest import ORIGINAL

from ga3c.Checkpoint import make_meta, save_checkpoint
from ga3c.NetworkVP import NetworkVP
from ga3c.Player import Player
from ga3c.settings import config_to_dict, parse_settings

REPO = Path(__file__).resolve().parent.parent
EPISODE_LINE = re.compile(r"^episode (\d+)/(\d+): score (-?[\d.e+]+), length (\d+) steps(?: \((\d+) no-ops\))?$",
                          re.MULTILINE)
SUMMARY_LINE = re.compile(r"^score (-?[\d.]+) \+- ([\d.]+) \(mean \+- std over (\d+) episodes?", re.MULTILINE)
VIDEO_LINE = re.compile(r"^video: (.+) \((\d+) frames", re.MULTILINE)


def headless_env() -> dict:
    """This environment without a display, with the checkout first on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def ga3c(args: list[str], cwd: Path, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs `python -m ga3c ARGS` in cwd with no display; the process group is killed on timeout."""
    proc = subprocess.Popen([sys.executable, "-m", "ga3c", *args], cwd=cwd, env=env or headless_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        pytest.fail(f"ga3c {' '.join(args)} did not finish within {timeout} s\n{out[-2000:]}\n{err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def play(args: list[str], cwd: Path, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return ga3c(["PLAY_MODE=True", "DEVICE=cpu", *args], cwd, timeout, env)


def episodes(stdout: str) -> list[tuple[float, int]]:
    return [(float(m.group(3)), int(m.group(4))) for m in EPISODE_LINE.finditer(stdout)]


def count_frames(path: Path) -> tuple[int, int, int]:
    """(frames decoded, width, height) of a video file."""
    cap = cv2.VideoCapture(str(path))
    assert cap.isOpened(), f"{path} cannot be opened"
    n = 0
    while cap.read()[0]:
        n += 1
    size = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
    cap.release()
    return n, *size


def check_summary(stdout: str, played: list[tuple[float, int]]) -> None:
    m = SUMMARY_LINE.search(stdout)
    assert m, stdout
    scores = np.array([s for s, _ in played])
    assert int(m.group(3)) == len(played)
    assert float(m.group(1)) == pytest.approx(scores.mean(), abs=0.006)
    assert float(m.group(2)) == pytest.approx(scores.std(), abs=0.006)


@pytest.fixture(scope="module")
def pong_run(tmp_path_factory):
    """A checkpoint and a results file written by a short real training run (one Pong episode, two agents)."""
    root = tmp_path_factory.mktemp("pong")
    ckpt_dir, results = root / "checkpoints", root / "results.txt"
    run = ga3c([*ORIGINAL, "ATARI_GAME=PongDeterministic-v4", "AGENTS=2", "EPISODES=1", "DYNAMIC_SETTINGS=False",
                "DEVICE=cpu", f"CHECKPOINT_DIR={ckpt_dir}", f"RESULTS_FILENAME={results}", "SAVE_MODELS=True"],
               root, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    assert list(ckpt_dir.glob("network_*.pt")), run.stderr[-3000:]
    assert results.read_text().strip(), "the training run wrote no results line"
    return root, ckpt_dir, results


def cartpole_checkpoint(folder: Path, seed: int = 3) -> Path:
    """A CartPole checkpoint built directly (an untrained MLP), as the server would save it."""
    cfg = parse_settings(["ATARI_GAME=CartPole-v1", "DEVICE=cpu", f"SEED={seed}"])
    net = NetworkVP(cfg, (4,), 2, torch.device("cpu"))
    return Path(save_checkpoint(str(folder), cfg.NETWORK_NAME, 7, net.get_state(),
                                {"episodes": 7, "steps": 100, "updates": 20}, config_to_dict(cfg),
                                make_meta("CartPole-v1", (4,), 2, "mlp")))


def test_play_trained_pong_records_one_frame_per_step_and_leaves_results_alone(pong_run, tmp_path):
    root, ckpt_dir, results = pong_run
    before = (results.read_bytes(), results.stat().st_mtime_ns)
    video = tmp_path / "run.mp4"
    run = play(["ATARI_GAME=PongDeterministic-v4", f"CHECKPOINT_DIR={ckpt_dir}", f"RESULTS_FILENAME={results}",
                "PLAY_EPISODES=2", "PLAY_NOOP_MAX=0", f"VIDEO_PATH={video}"], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    played = episodes(run.stdout)
    assert len(played) == 2, run.stdout
    for score, length in played:
        assert -21 <= score <= 21 and length > 0
    check_summary(run.stdout, played)
    # The rule: one frame after each reset and one after each agent step.
    frames, width, height = count_frames(video)
    assert frames == sum(length for _, length in played) + len(played)
    assert (width, height) == (160, 210)
    printed = VIDEO_LINE.search(run.stdout)
    assert printed and Path(printed.group(1)) == video.resolve() and int(printed.group(2)) == frames
    assert (results.read_bytes(), results.stat().st_mtime_ns) == before, "play mode wrote the results file"
    assert not (tmp_path / "play.mp4").exists() and not (tmp_path / "results.txt").exists()
    assert "network_" in run.stderr and "greedy" in run.stderr


def test_play_in_process_is_seeded_noops_and_default_video(pong_run, tmp_path, monkeypatch, capsys):
    """Same seed, same episodes (no-op counts and sampled actions included); no display -> ./play.mp4."""
    _, ckpt_dir, _ = pong_run
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    outputs = []
    threads = torch.get_num_threads()
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        monkeypatch.chdir(folder)
        cfg = parse_settings(["PLAY_MODE=True", "ATARI_GAME=PongDeterministic-v4", "DEVICE=cpu",
                              f"CHECKPOINT_DIR={ckpt_dir}", "PLAY_EPISODES=1", "PLAY_NOOP_MAX=30",
                              "PLAY_STOCHASTIC=True", "SEED=5"])
        assert Player(cfg).run() == 0
        out = capsys.readouterr().out
        m = EPISODE_LINE.search(out)
        assert m and m.group(5) is not None and 0 <= int(m.group(5)) <= 30, out
        frames, _, _ = count_frames(folder / "play.mp4")
        assert frames == int(m.group(4)) + 1
        outputs.append(m.group(0))
    assert outputs[0] == outputs[1]
    assert torch.get_num_threads() == threads  # play's single thread does not leak into the caller


def test_play_cartpole_records_its_render(tmp_path):
    ckpt_dir = tmp_path / "ck"
    cartpole_checkpoint(ckpt_dir)
    run = play(["ATARI_GAME=CartPole-v1", f"CHECKPOINT_DIR={ckpt_dir}", "PLAY_EPISODES=2"], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    played = episodes(run.stdout)
    assert len(played) == 2, run.stdout
    check_summary(run.stdout, played)
    assert "no-ops" not in run.stdout  # CartPole's action 0 is not a no-op: PLAY_NOOP_MAX does not apply
    frames, width, height = count_frames(tmp_path / "play.mp4")
    assert frames == sum(length for _, length in played) + 2
    assert (width, height) == (600, 400)


def test_play_cartpole_without_pygame(tmp_path):
    """pygame is a dependency, but a broken install must still play: a fake pygame that fails to import."""
    fake = tmp_path / "fake"
    (fake / "pygame").mkdir(parents=True)
    (fake / "pygame" / "__init__.py").write_text("raise ImportError('No module named pygame')\n")
    env = headless_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(fake), env.get("PYTHONPATH")]))
    ckpt_dir = tmp_path / "ck"
    cartpole_checkpoint(ckpt_dir)
    run = play(["ATARI_GAME=CartPole-v1", f"CHECKPOINT_DIR={ckpt_dir}", "PLAY_EPISODES=2"], tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert len(episodes(run.stdout)) == 2 and SUMMARY_LINE.search(run.stdout)
    assert "pygame" in run.stderr and "without a video" in run.stderr
    assert not (tmp_path / "play.mp4").exists()
    run = play(["ATARI_GAME=CartPole-v1", f"CHECKPOINT_DIR={ckpt_dir}", f"VIDEO_PATH={tmp_path / 'v.mp4'}"],
               tmp_path, env=env)
    assert run.returncode == 2 and "pygame" in run.stderr and "VIDEO_PATH" in run.stderr


def test_play_without_checkpoint_says_to_train_first(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    run = play(["ATARI_GAME=PongDeterministic-v4", f"CHECKPOINT_DIR={empty}"], tmp_path)
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if line.startswith("ga3c: error:")]
    assert len(errors) == 1 and "Traceback" not in run.stderr, run.stderr
    assert "no checkpoint in" in errors[0] and str(empty) in errors[0]
    assert "train first: ./_train.sh ATARI_GAME=PongDeterministic-v4" in errors[0]
    assert run.stdout == ""


def test_play_checkpoint_of_another_game_names_both(tmp_path):
    ckpt_dir = tmp_path / "ck"
    cartpole_checkpoint(ckpt_dir)
    run = play(["ATARI_GAME=PongDeterministic-v4", f"CHECKPOINT_DIR={ckpt_dir}"], tmp_path)
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if line.startswith("ga3c: error:")]
    assert len(errors) == 1 and "Traceback" not in run.stderr, run.stderr
    assert "'CartPole-v1'" in errors[0] and "'ALE/Pong-v5'" in errors[0]
    assert "./_play.sh ATARI_GAME=CartPole-v1" in errors[0]
    assert "./_train.sh ATARI_GAME=PongDeterministic-v4" in errors[0]


def test_play_checkpoint_of_a_module_game_names_its_module(tmp_path):
    """A 'module:EnvId' game's checkpoint stores the resolved id; the hint must name the id as given, which
    resolves on its own (the bare id is unknown until the module is imported)."""
    ckpt_dir = tmp_path / "ck"
    game = "popgym:popgym-RepeatPreviousEasy-v0"
    cfg = parse_settings([f"ATARI_GAME={game}", "DEVICE=cpu"])
    net = NetworkVP(cfg, (4,), 2, torch.device("cpu"))
    save_checkpoint(str(ckpt_dir), cfg.NETWORK_NAME, 7, net.get_state(), {"episodes": 7, "steps": 100, "updates": 20},
                    config_to_dict(cfg), make_meta("popgym-RepeatPreviousEasy-v0", (4,), 2, "mlp"))
    run = play(["ATARI_GAME=CartPole-v1", f"CHECKPOINT_DIR={ckpt_dir}"], tmp_path)
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if line.startswith("ga3c: error:")]
    assert len(errors) == 1 and "Traceback" not in run.stderr, run.stderr
    assert f"./_play.sh ATARI_GAME={game} " in errors[0]


def _pong_cfg(ckpt_dir: Path, *extra: str):
    return parse_settings(["PLAY_MODE=True", "ATARI_GAME=PongDeterministic-v4", "DEVICE=cpu",
                           f"CHECKPOINT_DIR={ckpt_dir}", "PLAY_NOOP_MAX=0", *extra])


def test_play_window_scales_paces_and_quits_on_q(pong_run, tmp_path, monkeypatch, capsys):
    """With a display the game goes to a real pygame window (SDL's dummy video driver: no X server here)."""
    import pygame

    _, ckpt_dir, _ = pong_run
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.chdir(tmp_path)
    sizes = []
    real_flip = pygame.display.flip

    def flip():
        real_flip()
        sizes.append(pygame.display.get_surface().get_size())
        if len(sizes) == 30:  # the user presses q after 30 frames
            pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=pygame.K_q))

    monkeypatch.setattr(pygame.display, "flip", flip)
    start = time.monotonic()
    assert Player(_pong_cfg(ckpt_dir, "PLAY_EPISODES=3")).run() == 0
    elapsed = time.monotonic() - start
    out = capsys.readouterr().out
    assert "stopped from the window after 0 complete episode(s)" in out and "no episode completed" in out
    assert len(sizes) == 30 and sizes[0] == (480, 630)  # 160x210 scaled 3x
    assert elapsed >= 29 / 15  # paced at 15 frames/s (Pong at frameskip 4)
    assert not list(tmp_path.iterdir())  # no video when a window shows the game


def test_play_falls_back_to_video_without_gui(pong_run, tmp_path, monkeypatch, capsys):
    import pygame

    _, ckpt_dir, _ = pong_run
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.chdir(tmp_path)

    def no_display():
        raise pygame.error("No available video device")

    monkeypatch.setattr(pygame.display, "init", no_display)
    assert Player(_pong_cfg(ckpt_dir, "PLAY_EPISODES=1")).run() == 0
    m = EPISODE_LINE.search(capsys.readouterr().out)
    assert m and count_frames(tmp_path / "play.mp4")[0] == int(m.group(4)) + 1


@pytest.mark.parametrize("favoured", [0, 1])
def test_play_takes_the_argmax_of_the_checkpoints_policy(tmp_path, monkeypatch, capsys, favoured):
    """A checkpoint whose policy head's bias makes one action dominate in every state: play mode takes that action
    at every step (both actions in turn, so neither the untrained network nor a fixed action passes)."""
    from ga3c.Environment import Environment

    cfg = parse_settings(["ATARI_GAME=CartPole-v1", "DEVICE=cpu", "SEED=3"])
    net = NetworkVP(cfg, (4,), 2, torch.device("cpu"))
    with torch.no_grad():
        net.model.policy.bias.copy_(torch.tensor([40.0, -40.0] if favoured == 0 else [-40.0, 40.0]))
    ckpt_dir = tmp_path / "ck"
    save_checkpoint(str(ckpt_dir), cfg.NETWORK_NAME, 7, net.get_state(), {"episodes": 7, "steps": 100, "updates": 20},
                    config_to_dict(cfg), make_meta("CartPole-v1", (4,), 2, "mlp"))
    taken = []
    real_step = Environment.step

    def step(self, action):
        taken.append(action)
        return real_step(self, action)

    monkeypatch.setattr(Environment, "step", step)
    monkeypatch.chdir(tmp_path)
    player = Player(parse_settings(["PLAY_MODE=True", "ATARI_GAME=CartPole-v1", "DEVICE=cpu",
                                    f"CHECKPOINT_DIR={ckpt_dir}", "PLAY_EPISODES=2", "SEED=1"]))
    assert player.run() == 0
    assert len(player.lengths) == 2 and all(length > 0 for length in player.lengths)
    assert taken == [favoured] * sum(player.lengths)
    assert len(episodes(capsys.readouterr().out)) == 2
