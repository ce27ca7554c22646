"""Bad input stops `python -m ga3c` before any work starts: exit status 2 and one line on stderr that starts with
`ga3c: error:` (log lines aside), no traceback, no process left behind, nothing written. DEVICE=cuda:0 on a
machine without a GPU is not an error: one warning, and the run goes on on the CPU.

The cases run as subprocesses, a few at a time, once for the module; each test checks one case.
"""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import PYTHON, leftover_processes, new_tag, tagged_env, tail

CARTPOLE = ["ATARI_GAME=CartPole-v1", "DEVICE=cpu", "DYNAMIC_SETTINGS=False"]
LOG_LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] ")


def make_checkpoints(root: Path) -> dict[str, Path]:
    """Checkpoint folders: a real CartPole one (episode 3, hidden size 64), a truncated copy, a text file, one
    made for Pong, and an empty folder."""
    import torch

    from ga3c.Checkpoint import make_meta, save_checkpoint
    from ga3c.NetworkVP import NetworkVP
    from ga3c.settings import config_to_dict, parse_settings

    cfg = parse_settings([*CARTPOLE, "MLP_HIDDEN_SIZE=64"])
    net = NetworkVP(cfg, (4,), 2, torch.device("cpu"))
    folders = {name: root / name for name in ("good", "truncated", "text", "pong", "empty")}
    for folder in folders.values():
        folder.mkdir()
    counters = {"episodes": 3, "steps": 300, "updates": 10}
    good = save_checkpoint(str(folders["good"]), "network", 3, net.get_state(), counters, config_to_dict(cfg),
                           make_meta("CartPole-v1", [4], 2, "mlp"))
    data = Path(good).read_bytes()
    (folders["truncated"] / "network_00000003.pt").write_bytes(data[: len(data) // 2])
    (folders["text"] / "network_00000003.pt").write_text("these are not the weights you are looking for\n")
    save_checkpoint(str(folders["pong"]), "network", 3, net.get_state(), counters, config_to_dict(cfg),
                    make_meta("ALE/Pong-v5", [84, 84, 4], 6, "cnn"))
    return folders


CASES: dict[str, tuple[list[str], str]] = {
    # name: (arguments, a regular expression the error line must match)
    "unknown-game": (["ATARI_GAME=NoSuchGame-v4", "DEVICE=cpu"], r"NoSuchGame-v4"),
    "game-module-missing": (["ATARI_GAME=popgymm:popgym-RepeatPreviousEasy-v0", "DEVICE=cpu"],
                            r"there is no module 'popgymm'; did you mean 'popgym'\? .*pip install popgymm"),
    "game-module-id-missing": (["ATARI_GAME=popgym:popgym-RepeatPrevousEasy-v0", "DEVICE=cpu"],
                               r"module 'popgym' registers no 'popgym-RepeatPrevousEasy-v0'; did you mean "
                               r"'popgym-RepeatPreviousEasy-v0'\?"),
    "checkpoint-folder-missing": ([*CARTPOLE, "LOAD_CHECKPOINT=True", "CHECKPOINT_DIR=nowhere"],
                                  r"no checkpoint in 'nowhere/'"),
    "checkpoint-folder-empty": ([*CARTPOLE, "LOAD_CHECKPOINT=True", "CHECKPOINT_DIR={empty}"], r"no checkpoint in"),
    "checkpoint-truncated": ([*CARTPOLE, "LOAD_CHECKPOINT=True", "CHECKPOINT_DIR={truncated}"],
                             r"network_00000003\.pt could not be read \(truncated or corrupt\)"),
    "checkpoint-not-a-checkpoint": ([*CARTPOLE, "LOAD_CHECKPOINT=True", "CHECKPOINT_DIR={text}"],
                                    r"could not be read"),
    "checkpoint-other-game": ([*CARTPOLE, "LOAD_CHECKPOINT=True", "CHECKPOINT_DIR={pong}"],
                              r"was made for another run: game 'ALE/Pong-v5' \(this run: 'CartPole-v1'\)"),
    "checkpoint-other-network": ([*CARTPOLE, "LOAD_CHECKPOINT=True", "CHECKPOINT_DIR={good}",
                                  "MLP_HIDDEN_SIZE=32"], r"network does not fit this one"),
    "config-not-toml": (["--config", "{bad_toml}"], r"is not valid TOML"),
    "config-unknown-key": (["--config", "{unknown_key}"], r"unknown setting 'AGENTZ'.*did you mean 'AGENTS'"),
    "agents-over-max": ([*CARTPOLE, "AGENTS=9", "MAX_AGENTS=8"], r"bad value for AGENTS: 9 .*at most MAX_AGENTS=8"),
    "shared-memory-max-agents": ([*CARTPOLE, "MAX_AGENTS=1000000000", "ENVS_PER_AGENT=8"],
                                 r"shared memory for MAX_AGENTS=1000000000 x ENVS_PER_AGENT=8 needs .* /dev/shm"),
    "shared-memory-slots": ([*CARTPOLE, "ENVS_PER_AGENT=8", "MAX_QUEUE_SIZE=1000000000"],
                            r"needs \d+ MiB but /dev/shm has \d+ MiB free; lower .*MAX_QUEUE_SIZE"),
    "checkpoint-folder-not-writable": ([*CARTPOLE, "CHECKPOINT_DIR={a_file}/checkpoints"],
                                       r"CHECKPOINT_DIR '.*' is not writable"),
    "log-folder-not-writable": ([*CARTPOLE, "TENSORBOARD=True", "LOG_DIR={a_file}/logs"],
                                r"LOG_DIR '.*' is not writable"),
}


def run_case(args: list[str], cwd: Path) -> tuple[int, str, str, list[str]]:
    tag = new_tag()
    proc = subprocess.run([PYTHON, "-m", "ga3c", *args], cwd=cwd, env=tagged_env(tag), capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stdout, proc.stderr, leftover_processes(tag)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, tuple]:
    root = tmp_path_factory.mktemp("bad-input")
    places = {name: str(path) for name, path in make_checkpoints(root).items()}
    (root / "bad.toml").write_text("AGENTS = [1, 2\n")
    (root / "unknown.toml").write_text("AGENTZ = 3\n")
    (root / "a-file").write_text("a file, not a folder\n")
    places.update(bad_toml=str(root / "bad.toml"), unknown_key=str(root / "unknown.toml"),
                  a_file=str(root / "a-file"))
    jobs = {}
    with ThreadPoolExecutor(max_workers=4) as pool:
        for name, (args, _) in CASES.items():
            cwd = root / f"run-{name}"
            cwd.mkdir()
            jobs[name] = (pool.submit(run_case, [a.format(**places) for a in args], cwd), cwd)
        cwd = root / "run-cuda"
        cwd.mkdir()
        jobs["cuda"] = (pool.submit(run_case, [*CARTPOLE, "DEVICE=cuda:0", "AGENTS=1", "MAX_STEPS=200",
                                               "SAVE_MODELS=False"], cwd), cwd)
        return {name: (*future.result(), cwd) for name, (future, cwd) in jobs.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_error_line_and_status_2(outcomes, case):
    rc, out, err, left, cwd = outcomes[case]
    assert rc == 2, f"exit status {rc}\nstdout:\n{tail(out)}\nstderr:\n{tail(err)}"
    assert "Traceback" not in err, tail(err)
    lines = [line for line in err.splitlines() if line.strip() and not LOG_LINE.match(line)]
    assert len(lines) == 1 and lines[0].startswith("ga3c: error: "), f"stderr:\n{err}"
    assert re.search(CASES[case][1], lines[0]), lines[0]
    assert not left, left
    # nothing was written: no results, no checkpoint
    assert not (cwd / "results.txt").exists()
    assert not list(cwd.glob("checkpoints/*"))


def test_cuda_without_a_gpu_warns_and_uses_the_cpu(outcomes):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    rc, out, err, left, _ = outcomes["cuda"]
    assert rc == 0, f"exit status {rc}\n{tail(err)}"
    warnings = [line for line in err.splitlines() if "asks for a GPU" in line]
    assert len(warnings) == 1, err
    assert "CUDA is not available here: using the CPU" in warnings[0]
    assert "on cpu" in err
    assert not left, left
