"""Shows that the fast tests have teeth: deliberate faults in the data path, each of which they must catch.

Each fault is a list of edits (file, exact original text, mutated text). The script copies the checkout (the files
git tracks or would track) into a temporary folder, checks that the tests pass there unmutated, then applies one
fault at a time to that copy (never to the checkout), runs the tests that should catch it, and restores the file.
It prints a table (fault, caught, by which test) and exits with status 1 if any fault survives, 2 if a fault's
original text is not found exactly once (the code moved: update the list) or the unmutated tests fail.

    python scripts/mutation_check.py              # every fault
    python scripts/mutation_check.py --list       # the faults and their test selections
    python scripts/mutation_check.py -k lag       # the faults whose name contains 'lag'
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The fast tests of the data path: no learning, no training run (a few seconds each).
FAST = ["tests/test_data_path.py", "tests/test_experience.py", "tests/test_vtrace.py",
        "tests/test_dynamic_adjustment.py", "-k", "not cartpole"]
PLAY = ["tests/test_play.py", "-k", "argmax"]
QUARANTINE = ["tests/test_server.py", "-k", "quarantine"]
CRASH_LOOP = ["tests/test_server.py", "-k", "crash_loop"]
ANNEALING = ["tests/test_server.py", "-k", "annealing"]
STEP_SCHEDULE = ["tests/test_server.py", "-k", "step_schedule"]  # a real run on ANNEALING_STEP_COUNT
TENSORBOARD = ["tests/test_server.py", "-k", "train_scalars"]
# the recurrent path: the predictor's and the trainer's outputs, the stored start states (no learning run)
LSTM = ["tests/test_lstm.py", "-k", "not learns and not resumes"]
PPO = ["tests/test_network.py", "-k", "ppo"]

AGENT = "ga3c/ProcessAgent.py"
ROLLOUT = "ga3c/Rollout.py"
PREDICTOR = "ga3c/ThreadPredictor.py"
TRAINER = "ga3c/ThreadTrainer.py"
NETWORK = "ga3c/NetworkVP.py"


@dataclass
class Fault:
    name: str
    edits: list[tuple[str, str, str]]  # (file, original text, mutated text)
    tests: list[str] = field(default_factory=lambda: list(FAST))


FAULTS = [
    Fault("predictor: replies written to the agents in reverse order (swapped ids)",
          [(PREDICTOR, "sh.policy[ids] = policy", "sh.policy[ids[::-1]] = policy")]),
    Fault("predictor: values of a batch crossed between agents",
          [(PREDICTOR, "sh.value[ids] = value.numpy().reshape(n, envs)",
            "sh.value[ids] = value.numpy().reshape(envs, n).T")]),
    Fault("predictor: version read after the forward pass (stale for the weights that acted)",
          [(PREDICTOR, "sh.version[ids] = version", "sh.version[ids] = srv.network.version")]),
    Fault("agent: each action paired with the next state (off-by-one in the rollout)",
          [(ROLLOUT, 'sh.exp_states[s, :n + 1] = out["states"][:, cols]',
            'sh.exp_states[s, :n] = out["states"][1:, cols]')]),
    Fault("agent: the state after the action recorded instead of the one before",
          [(ROLLOUT, "        self.states[t] = self.obs\n", ""),
           (ROLLOUT, "        self.t = t + 1\n", "        self.states[t] = self.obs\n        self.t = t + 1\n")]),
    Fault("agent: a stale version recorded (one update behind)",
          [(ROLLOUT, "self.versions[t] = version", "self.versions[t] = version - 1")]),
    Fault("agent: bootstrap value dropped (returns end at 0)",
          [(ROLLOUT, "self.values[:n], bootstrap,", "self.values[:n], 0 * bootstrap,")]),
    Fault("agent: terminal flag ignored",
          [(ROLLOUT, "self.terminated[t, e] = term\n", "self.terminated[t, e] = False\n")]),
    Fault("agent: time-limit (truncated) flag not sent to the trainers",
          [(ROLLOUT, 'sh.exp_truncated[s, :n] = out["truncated"][:, cols]', "sh.exp_truncated[s, :n] = 0")]),
    Fault("agent: value of the wrong env",
          [(ROLLOUT, "self.values[t] = value\n", "self.values[t] = value[::-1]\n")]),
    Fault("agent: log-probability of the wrong action",
          [(ROLLOUT, "np.log(policy[self._rows, chosen] + 1e-20)",
            "np.log(policy[self._rows, (chosen + 1) % policy.shape[1]] + 1e-20)")]),
    Fault("agent: actions drawn uniformly, not from the policy",
          [(ROLLOUT, "chosen = (cum < u[:, None]).sum(axis=1)",
            "chosen = self.rng.integers(0, policy.shape[1], len(self.envs))")]),
    Fault("agent: every env acts with env 0's policy",
          [(ROLLOUT, "cum = np.cumsum(policy, axis=1)", "cum = np.cumsum(policy[[0] * len(self.envs)], axis=1)")]),
    Fault("agent: partial rollout not sent on stop",
          [(AGENT, "if rollout.full or (stopping and rollout.t > 0):", "if rollout.full:")]),
    Fault("lstm agent: an environment's state not zeroed when it resets",
          [(ROLLOUT, "                    self.state[0][e] = 0.0\n                    self.state[1][e] = 0.0\n", "")],
          LSTM),
    Fault("lstm agent: a rollout stores the state of its last step, not of its first",
          [(ROLLOUT, 'out["h0"], out["c0"] = self.start_state', 'out["h0"], out["c0"] = self.state')], LSTM),
    Fault("lstm predictor: the next state not written back",
          [(PREDICTOR, "sh.h[ids] = h1.numpy().reshape(n, envs, size)", "pass")], LSTM),
    Fault("lstm trainer: the state not zeroed after an episode's last step in the unroll",
          [("ga3c/NetworkVP.py", "            h, c = h * mask, c * mask\n", "")], LSTM),
    Fault("lstm trainer: time-limit steps not counted as episode ends in the unroll",
          [(TRAINER, '(buf["done"][cols, rows] | buf["truncated"][cols, rows])', '(buf["done"][cols, rows])')],
          LSTM),
    Fault("returns: not discounted",
          [("ga3c/Experience.py", "running = rewards[t] + discount * running", "running = rewards[t] + running")]),
    Fault("trainer: MAX_POLICY_LAG with < for <= (a lag at the limit dropped)",
          [(TRAINER, "keep = lag <= cfg.MAX_POLICY_LAG", "keep = lag < cfg.MAX_POLICY_LAG")]),
    Fault("trainer: MAX_POLICY_LAG=0 drops instead of keeping all",
          [(TRAINER, "if cfg.MAX_POLICY_LAG > 0:\n            keep", "if cfg.MAX_POLICY_LAG >= 0:\n            keep")]),
    Fault("trainer (V-trace): MAX_POLICY_LAG with >= for > (a lag at the limit dropped)",
          [(TRAINER, "(lag[i, :lengths[i]] > cfg.MAX_POLICY_LAG)", "(lag[i, :lengths[i]] >= cfg.MAX_POLICY_LAG)")]),
    Fault("trainer (V-trace): time-limit flags not passed to V-trace",
          [(TRAINER, 'truncated=block["truncated"].bool())', "truncated=None)")]),
    Fault("trainer: returns copied env-major (misaligned with states and actions)",
          [(TRAINER, "returns_np[n:end] = sh.exp_returns[slot, :steps].reshape(count)",
            "returns_np[n:end] = sh.exp_returns[slot, :steps].T.reshape(count)")]),
    Fault("trainer: wrong slot released",
          [(TRAINER, "srv.release_slot(slot)", "srv.release_slot(0)")]),
    Fault("dynamic adjustment: objective divided by the settling time too",
          [("ga3c/ThreadDynamicAdjustment.py", "return (c[sb.C_TRAINED] - before) / cfg.DYNAMIC_SETTINGS_STEP_WAIT",
            "return (c[sb.C_TRAINED] - before) / (cfg.DYNAMIC_SETTINGS_STEP_WAIT + settle)")]),
    Fault("dynamic adjustment: the settling time measured too",
          [("ga3c/ThreadDynamicAdjustment.py",
            "        c = self.server.shared.counters\n        before = c[sb.C_TRAINED]\n", ""),
           ("ga3c/ThreadDynamicAdjustment.py", "        settle = min(3.0, cfg.DYNAMIC_SETTINGS_STEP_WAIT / 4)\n",
            "        settle = min(3.0, cfg.DYNAMIC_SETTINGS_STEP_WAIT / 4)\n        c = self.server.shared.counters\n"
            "        before = c[sb.C_TRAINED]\n")]),
    Fault("play: argmin instead of argmax",
          [("ga3c/Player.py", "action = int(np.argmax(p))", "action = int(np.argmin(p))")], PLAY),
    Fault("play: the checkpoint's weights not loaded",
          [("ga3c/Player.py", 'network.set_state(checkpoint["network"])', "pass")], PLAY),
    Fault("server: a dead agent's id reused at once",
          [("ga3c/Server.py", "taken = set(self.agents) | set(self.retiring) | set(self.dead_ids)",
            "taken = set(self.agents) | set(self.retiring)")], QUARANTINE),
    Fault("server: a dead agent's reply pipe closed at once",
          [("ga3c/Server.py", "self.closing.append((time.time() + DEAD_ID_SECONDS, writer))",
            "self.closing.append((time.time(), writer))")], QUARANTINE),
    Fault("server: a crash loop allowed more deaths than AGENT_DEATHS_ALLOWED",
          [("ga3c/Server.py", "if len(self.agent_deaths) > AGENT_DEATHS_ALLOWED:",
            "if len(self.agent_deaths) > AGENT_DEATHS_ALLOWED + 3:")], CRASH_LOOP),
    Fault("server: annealing not clamped at ANNEALING_EPISODE_COUNT",
          [("ga3c/Server.py", "progress = min(self.episodes(), cfg.ANNEALING_EPISODE_COUNT) / ",
            "progress = self.episodes() / ")], ANNEALING),
    Fault("server: ANNEALING_STEP_COUNT ignored (the schedule counts episodes)",
          [("ga3c/Server.py", "if cfg.ANNEALING_STEP_COUNT:", "if False:")], ANNEALING),
    Fault("server: the step schedule not clamped at ANNEALING_STEP_COUNT",
          [("ga3c/Server.py", "progress = min(self.total_steps(), cfg.ANNEALING_STEP_COUNT) / ",
            "progress = self.total_steps() / ")], ANNEALING),
    Fault("server: the step schedule counting only this run's steps (a resumed run restarts it)",
          [("ga3c/Server.py", "progress = min(self.total_steps(), cfg.ANNEALING_STEP_COUNT)",
            "progress = min(int(self.shared.agent_steps.sum()), cfg.ANNEALING_STEP_COUNT)")], ANNEALING),
    Fault("trainer: the starting learning rate trained with, not the annealed one",
          [(TRAINER, "returns[:used], srv.learning_rate, srv.beta,",
            "returns[:used], srv.cfg.LEARNING_RATE_START, srv.beta,")], STEP_SCHEDULE),
    Fault("server: beta missing from the train/* scalars",
          [("ga3c/Server.py", '"train/beta": self.beta,', "")], TENSORBOARD),
    Fault("trainer: PPO's log mu not kept in step with the batch when stale transitions are dropped",
          [(TRAINER, "                if logp is not None:\n                    logp = logp[index]\n", "")]),
    Fault("trainer: an update counted per batch, not per PPO epoch",
          [(TRAINER, "c[sb.C_UPDATES] += srv.network.ppo_epochs", "c[sb.C_UPDATES] += 1")]),
    Fault("network: PPO's surrogate without the clip",
          [(NETWORK, "surrogate = torch.minimum(ratio * advantages, clipped * advantages)",
            "surrogate = ratio * advantages")], PPO),
    Fault("network: PPO's later epochs recompute the advantages with the moved weights",
          [(NETWORK, "stats, advantages = self._train_step(", "stats, _ = self._train_step(")], PPO),
]


def copy_checkout(dest: Path) -> None:
    """The files git tracks, or would track (untracked and not ignored), as they are in the working tree."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def check_texts(faults: list[Fault]) -> list[str]:
    problems = []
    for fault in faults:
        texts: dict[str, str] = {}
        for path, original, _ in fault.edits:
            text = texts.setdefault(path, (REPO / path).read_text())
            count = text.count(original)
            if count != 1:
                problems.append(f"{fault.name}: the original text is found {count} times in {path} (expected once; "
                                f"the code moved: update the list in scripts/mutation_check.py):\n    {original!r}")
    return problems


def run_tests(root: Path, selection: list[str], timeout: float) -> tuple[bool, str, str]:
    """(passed, the first failing test or '', the end of the output)."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *selection]
    try:
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"(no end within {timeout:.0f} s: a hang)", ""
    out = proc.stdout + proc.stderr
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.MULTILINE)
    return proc.returncode == 0, (failed[0] if failed else ""), out[-3000:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", dest="pattern", default="", help="only the faults whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the faults and exit")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per test run (a hang counts as caught)")
    args = parser.parse_args()
    faults = [f for f in FAULTS if args.pattern.lower() in f.name.lower()]
    if args.list:
        for i, f in enumerate(faults, 1):
            print(f"{i:2d}. {f.name}  [{' '.join(f.tests)}]")
        return 0
    problems = check_texts(faults)
    if problems:
        print("mutation_check: error:\n" + "\n".join(problems), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ga3c-mutation-") as tmp:
        root = Path(tmp)
        copy_checkout(root)
        selections = []
        for f in faults:
            if f.tests not in selections:
                selections.append(f.tests)
        for selection in selections:
            ok, _, out = run_tests(root, selection, args.timeout)
            if not ok:
                print(f"mutation_check: error: the unmutated tests fail ({' '.join(selection)}):\n{out}",
                      file=sys.stderr)
                return 2
        rows = []
        for i, fault in enumerate(faults, 1):
            saved = {path: (root / path).read_text() for path, _, _ in fault.edits}
            texts = dict(saved)
            for path, original, mutated in fault.edits:
                texts[path] = texts[path].replace(original, mutated, 1)
            for path, text in texts.items():
                (root / path).write_text(text)
            start = time.time()
            try:
                passed, by, _ = run_tests(root, fault.tests, args.timeout)
            finally:
                for path, text in saved.items():
                    (root / path).write_text(text)
            rows.append((fault.name, not passed, by))
            print(f"{i:2d}/{len(faults)} {'caught  ' if not passed else 'SURVIVED'} {time.time() - start:5.0f} s  "
                  f"{fault.name}  {by}", flush=True)
    width = max(len(name) for name, _, _ in rows)
    print(f"\n| {'fault':<{width}} | caught | by |\n|{'-' * (width + 2)}|--------|----|")
    for name, caught, by in rows:
        print(f"| {name:<{width}} | {'yes' if caught else 'NO':<6} | {by or '-'} |")
    caught = sum(c for _, c, _ in rows)
    print(f"\ncaught {caught} of {len(rows)}")
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
