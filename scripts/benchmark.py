"""Throughput benchmark: the environments alone, then a real GA3C training run, side by side in one invocation.

    python scripts/benchmark.py --config configs/cpu.toml [--game PongDeterministic-v4] [--seconds 60]
                                [--warmup 15] [--env-seconds 20] [--env-once] [--dynamic] [--profile] [KEY=VALUE ...]
    python scripts/benchmark.py --config configs/cpu.toml NETWORK_TYPE=lstm      # the LSTM network
    python scripts/benchmark.py --config configs/cpu.toml --compare NETWORK_TYPE=lstm   # both, one after the other

(1) env-only: the same number of agent processes, each stepping ENVS_PER_AGENT environments with random actions
and the same preprocessing, no model: the ceiling. (2) a real training run (the Server, its agents, predictors
and trainers) measured over `--seconds` after `--warmup`. (3) env-only again: a shared machine's speed drifts by
10-30% within minutes, so the ratio is taken against the mean of the two env-only readings, and the ratios against
each reading alone are printed beside it (their spread is the machine's, not the trainer's). Prints a table and,
as its last line, one JSON object.
With --profile it also prints where the time goes in each component. --dynamic runs with dynamic adjustment and
reports the NT/NP/NA it settled on. --cluster ray runs the training with CLUSTER=ray (agent groups as Ray actors
beside the agent processes; a local Ray instance unless RAY_ADDRESS is set) and reports the same JSON, the
groups' transitions counted with the agents' steps. --compare KEY=VALUE runs a second training run with that
setting added, in the same invocation, and reports its figures and its steps/s as a ratio of the first's. An
agent's memory is given as RSS (shared libraries counted in every process), PSS and private memory.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time

import numpy as np

# ga3c is imported inside the functions: the env-only and agent processes import this file again (as their
# main module) and need none of it.


def _env_worker(cfg, seed: int, seconds: float, counter, ready, start_event) -> None:
    """Steps ENVS_PER_AGENT environments with random actions, as an agent would without a model."""
    from ga3c.Environment import Environment

    envs = [Environment(cfg, seed=seed + e) for e in range(cfg.ENVS_PER_AGENT)]
    for env in envs:
        env.reset()
    rng = np.random.default_rng(seed)
    with ready.get_lock():
        ready.value += 1
    start_event.wait()
    steps = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        actions = rng.integers(0, envs[0].num_actions, size=len(envs))
        for env, action in zip(envs, actions, strict=True):
            _, _, term, trunc = env.step(int(action))
            if term or trunc:
                env.reset()
        steps += len(envs)
    with counter.get_lock():
        counter.value += steps


def env_only(cfg, agents: int, seconds: float) -> float:
    """Agent steps per second of `agents` processes that only step their environments."""
    ctx = mp.get_context("spawn")
    counter = ctx.Value("q", 0)
    ready = ctx.Value("i", 0)
    start = ctx.Event()
    procs = [ctx.Process(target=_env_worker, args=(cfg, cfg.SEED + 1000 * i, seconds, counter, ready, start),
                         daemon=True) for i in range(agents)]
    for p in procs:
        p.start()
    deadline = time.time() + 120
    while ready.value < agents and time.time() < deadline:  # every process has imported and made its envs
        time.sleep(0.05)
    t0 = time.perf_counter()
    start.set()
    for p in procs:
        p.join(timeout=seconds + 60)
    elapsed = time.perf_counter() - t0
    for p in procs:
        if p.is_alive():
            p.kill()
    return counter.value / max(elapsed, seconds)


def rss_mb(pid: int) -> float:
    """Resident memory of a process without the shared-memory buffers (VmRSS - RssShmem), which every process
    maps; the total adds them once."""
    fields = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssShmem"):
                    fields[key] = int(rest.split()[0]) / 1024
    except OSError:
        return 0.0
    return fields.get("VmRSS", 0.0) - fields.get("RssShmem", 0.0)


def smaps_mb(pid: int) -> tuple[float, float]:
    """(PSS, private) memory of a process in MB (/proc/PID/smaps_rollup): the RSS counts each shared library and
    the shared arrays once per process; PSS splits what is shared among the processes that map it, and private
    memory is what the process alone holds."""
    fields = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Pss", "Private_Clean", "Private_Dirty"):
                    fields[key] = int(rest.split()[0]) / 1024
    except OSError:
        return 0.0, 0.0
    return fields.get("Pss", 0.0), fields.get("Private_Clean", 0.0) + fields.get("Private_Dirty", 0.0)


def cpu_model() -> str:
    """The CPU's model name and whether it computes bfloat16 natively: figures from different CPUs differ."""
    import torch

    from ga3c.NetworkVP import native_bf16

    name = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    return f"{name} ({'native' if native_bf16(torch.device('cpu')) else 'no native'} bf16)"


def code_version() -> str:
    """Which ga3c ran: the folder its package was imported from and that checkout's commit. An editable install
    serves one checkout to every script that does not put another first on PYTHONPATH, so a side-by-side of two
    commits must name the code each side ran."""
    import subprocess

    import ga3c

    folder = os.path.dirname(os.path.dirname(os.path.realpath(ga3c.__file__)))
    try:
        commit = subprocess.run(["git", "-C", folder, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", folder, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", ""
    if not commit:
        return folder
    return f"{folder} (commit {commit}{', with uncommitted changes' if dirty else ''})"


def cpu_seconds(path: str) -> float:
    """utime + stime of a process or thread from its /proc stat file."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_component(server) -> dict[str, float]:
    """CPU seconds used so far by the agents, the stats process, and the main process's threads by kind."""
    out = {"agents": sum(cpu_seconds(f"/proc/{proc.pid}/stat") for proc, _ in list(server.agents.values()))}
    out["stats process"] = cpu_seconds(f"/proc/{server.stats.pid}/stat") if server.stats.pid else 0.0
    kinds = {}
    for thread in list(server.predictors) + list(server.trainers):
        if thread.native_id is not None:
            kinds[thread.native_id] = "predictor threads" if "predictor" in thread.name else "trainer threads"
    pid = os.getpid()
    total = cpu_seconds(f"/proc/{pid}/stat")
    for kind in ("predictor threads", "trainer threads"):
        out[kind] = sum(cpu_seconds(f"/proc/{pid}/task/{tid}/stat") for tid, k in kinds.items() if k == kind)
    out["main process, other"] = total - out["predictor threads"] - out["trainer threads"]
    return out


class Probe(threading.Thread):
    """Samples the server's counters at the end of the warm-up and of the window, and the processes' RSS."""

    def __init__(self, server, warmup: float, seconds: float) -> None:
        super().__init__(daemon=True)
        self.server, self.warmup, self.seconds = server, warmup, seconds
        self.peak_total = 0.0
        self.peak_agent = 0.0
        self.peak_agent_pss = 0.0
        self.peak_agent_private = 0.0
        self.first = self.last = None

    def snapshot(self) -> dict:
        from ga3c.ray_cluster import cluster_steps

        srv = self.server
        sh = srv.shared
        return {"t": time.perf_counter(), "steps": float(sh.agent_steps.sum() + cluster_steps(sh)),
                "cluster_steps": float(cluster_steps(sh)), "counters": sh.counters.copy(),
                "agent_time": sh.agent_time.sum(axis=0).copy(), "counts": srv.counts(),
                "cpu": cpu_by_component(srv)}

    def sample_rss(self) -> None:
        srv = self.server
        pids = [proc.pid for proc, _ in list(srv.agents.values())]
        agents = [rss_mb(pid) for pid in pids]
        for pss, private in map(smaps_mb, pids):
            self.peak_agent_pss = max(self.peak_agent_pss, pss)
            self.peak_agent_private = max(self.peak_agent_private, private)
        total = (rss_mb(os.getpid()) + sum(agents) + (rss_mb(srv.stats.pid) if srv.stats.pid else 0.0)
                 + srv.shared.layout.nbytes() / 2**20)
        self.peak_total = max(self.peak_total, total)
        if agents:
            self.peak_agent = max(self.peak_agent, max(agents))

    def run(self) -> None:
        deadline = time.time() + 180
        while time.time() < deadline and self.server.stop_reason is None:  # every agent has started stepping
            ids = list(self.server.agents)
            cluster = getattr(self.server, "cluster", None)
            groups_up = (not self.server.cfg.CLUSTER or cluster is not None and cluster.rollouts > 0
                         and cluster.live_groups() == cluster.group_count())
            if ids and all(self.server.shared.agent_steps[i] > 0 for i in ids) and groups_up:
                break
            time.sleep(0.2)
        start = time.perf_counter()
        while time.perf_counter() - start < self.warmup:
            self.sample_rss()
            time.sleep(0.5)
        self.first = self.snapshot()
        while time.perf_counter() - start < self.warmup + self.seconds:
            self.sample_rss()
            time.sleep(0.5)
        self.last = self.snapshot()
        self.server.request_stop("benchmark window over")


def profile_table(a: dict, b: dict, frames_per_step: int) -> list[str]:
    """Where the time went during the window, in microseconds of each component per agent step."""
    from ga3c import SharedBuffers as sb
    steps = max(b["steps"] - a["steps"], 1.0)
    at = b["agent_time"] - a["agent_time"]
    c = b["counters"] - a["counters"]
    env, pre, wait, send, total = (at[sb.A_T_ENV], at[sb.A_T_PREPROCESS], at[sb.A_T_PREDICT_WAIT], at[sb.A_T_SEND],
                                   at[sb.A_T_TOTAL])
    # agents add their loop time when they exit, so the window's "other" is derived from the wall time instead
    agents = b["counts"][2]
    wall = (b["t"] - a["t"]) * agents
    rows = [
        ("agents", "emulator (gymnasium step)", env - pre),
        ("agents", "preprocessing (resize, stack)", pre),
        ("agents", "waiting for predictions", wait),
        ("agents", "returns + slot copy + slot wait", send),
        ("agents", "other (sampling, bookkeeping)", max(wall - env - wait - send, 0.0)),
        ("predictors", "waiting for requests", c[sb.C_T_PREDICT_WAIT]),
        ("predictors", "gathering states", c[sb.C_T_PREDICT_GATHER]),
        ("predictors", "forward pass", c[sb.C_T_PREDICT_MODEL]),
        ("predictors", "replies", c[sb.C_T_PREDICT_REPLY]),
        ("trainers", "waiting for rollouts", c[sb.C_T_TRAIN_WAIT]),
        ("trainers", "copying rollouts", c[sb.C_T_TRAIN_COPY]),
        ("trainers", "training step", c[sb.C_T_TRAIN_MODEL]),
    ]
    del total  # the agents' own loop totals arrive only when they exit
    lines = [f"{'component':<11} {'where':<34} {'us/step':>9} {'share':>7}"]
    groups: dict[str, float] = {}
    for group, _, seconds in rows:
        groups[group] = groups.get(group, 0.0) + seconds
    for group, where, seconds in rows:
        share = seconds / groups[group] if groups[group] else 0.0
        lines.append(f"{group:<11} {where:<34} {1e6 * seconds / steps:9.1f} {100 * share:6.1f}%")
    lines.append(f"(wall times, summed over {agents} agents and over the threads of each kind; "
                 f"1 step = {frames_per_step} frames)")
    lines.append("")
    lines.append(f"{'CPU time of':<34} {'us/step':>9} {'cores':>7}")
    dt = b["t"] - a["t"]
    for key in b["cpu"]:
        used = b["cpu"][key] - a["cpu"].get(key, 0.0)
        lines.append(f"{key:<34} {1e6 * used / steps:9.1f} {used / dt:7.2f}")
    return lines


def measure_training(cfg, args) -> dict | None:
    """One real training run (the Server) measured over args.seconds after args.warmup: returns its figures (the
    env-only ones still None), or None when it ended early; prints its profile with --profile."""
    from ga3c import SharedBuffers as sb
    from ga3c.Server import Server

    server = Server(cfg)
    probe = Probe(server, args.warmup, args.seconds)
    probe.start()
    status = server.main()
    probe.join(timeout=5)
    cluster = getattr(server, "cluster", None)
    if cfg.CLUSTER and cluster is None:
        print("benchmark: this Server does not start the agent groups (no CLUSTER hook)", file=sys.stderr)
        return None
    if status != 0 or probe.last is None:
        print("benchmark: the training run ended early", file=sys.stderr)
        return None
    a, b = probe.first, probe.last
    dt = b["t"] - a["t"]
    c = b["counters"] - a["counters"]
    steps_rate = (b["steps"] - a["steps"]) / dt
    cluster_steps_rate = (b["cluster_steps"] - a["cluster_steps"]) / dt
    nt, np_, na = b["counts"]
    result = {
        "game": server.game_id,
        "env_only_steps_per_s": None,
        "env_only_before_after": None,
        "train_steps_per_s": round(steps_rate, 1),
        "train_frames_per_s": round(steps_rate * server.frames_per_step, 1),
        "ratio": None,
        "ratio_range": None,
        "pps": round(c[sb.C_PREDICTIONS] / dt, 1),
        "tps": round(c[sb.C_UPDATES] / dt, 2),
        "trained_samples_per_s": round(c[sb.C_TRAINED] / dt, 1),
        "mean_batch_predict": round(c[sb.C_PREDICTIONS] / max(c[sb.C_PREDICT_BATCHES], 1), 2),
        "mean_batch_train": round(c[sb.C_TRAINED] / max(c[sb.C_TRAIN_BATCHES], 1), 2),
        "policy_lag_mean": round(c[sb.C_LAG_SUM] / max(c[sb.C_TRAINED], 1), 2),
        "policy_lag_max": int(b["counters"][sb.C_LAG_MAX]),  # the run's largest, warm-up included
        "peak_rss_mb_total": round(probe.peak_total, 1),
        "peak_rss_mb_per_agent": round(probe.peak_agent, 1),
        "peak_pss_mb_per_agent": round(probe.peak_agent_pss, 1),
        "peak_private_mb_per_agent": round(probe.peak_agent_private, 1),
        "seconds": round(dt, 1),
        "NT": nt, "NP": np_, "NA": na,
        "ENVS_PER_AGENT": cfg.ENVS_PER_AGENT,
        "TRAINING_MIN_BATCH_SIZE": cfg.TRAINING_MIN_BATCH_SIZE,
        "PRECISION": cfg.PRECISION,
        "precision": server.network.precision,
        "NETWORK_TYPE": cfg.NETWORK_TYPE,
        "network": server.meta["network"],
        "TORCH_THREADS": cfg.TORCH_THREADS,
        "dynamic": args.dynamic,
        "cluster": cfg.CLUSTER or None,
        "groups": cluster.group_count() if cluster is not None else 0,
        "CLUSTER_ENVS_PER_GROUP": cfg.CLUSTER_ENVS_PER_GROUP if cluster is not None else None,
        "group_steps_per_s": round(cluster_steps_rate, 1) if cluster is not None else None,
        "group_policy_lag_at_delivery_mean": round(cluster.mean_lag(), 2) if cluster is not None else None,
        "device": str(server.device),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "code": code_version(),
    }
    if args.profile:
        print()
        print("\n".join(profile_table(a, b, server.frames_per_step)))
    return result


def add_env_only(result: dict, before: float | None, after: float | None) -> None:
    """Fills in the env-only figures: the ratio against the mean of the readings, and against each alone."""
    readings = [rate for rate in (before, after) if rate is not None]
    if not readings:
        return
    mean = sum(readings) / len(readings)
    train = result["train_steps_per_s"]
    result["env_only_steps_per_s"] = round(mean, 1)
    result["env_only_before_after"] = [round(before, 1) if before is not None else None,
                                       round(after, 1) if after is not None else None]
    result["ratio"] = round(train / mean, 3)
    result["ratio_range"] = [round(train / max(readings), 3), round(train / min(readings), 3)]


def print_table(result: dict) -> None:
    """The figures of one training run, as a table."""
    print()
    print(f"{'measure':<26} {'value':>12}")
    for key in ("env_only_steps_per_s", "train_steps_per_s", "train_frames_per_s", "ratio", "pps", "tps",
                "mean_batch_predict", "mean_batch_train", "policy_lag_mean", "policy_lag_max", "peak_rss_mb_total",
                "peak_rss_mb_per_agent", "peak_pss_mb_per_agent", "peak_private_mb_per_agent"):
        print(f"{key:<26} {result[key] if result[key] is not None else '-':>12}")
    if result["env_only_before_after"] is not None:
        before, after = (rate if rate is not None else "-" for rate in result["env_only_before_after"])
        low, high = result["ratio_range"]
        print(f"{'env-only before / after':<26} {before} / {after}: ratio {low} to {high} against either alone")
    if result["cluster"] is not None:
        print(f"{'agent groups (Ray)':<26} {result['groups']} x {result['CLUSTER_ENVS_PER_GROUP']} envs, "
              f"{result['group_steps_per_s']} of the steps/s, policy lag at delivery "
              f"{result['group_policy_lag_at_delivery_mean']}")
    print(f"{'settings':<26} NT={result['NT']} NP={result['NP']} NA={result['NA']} "
          f"ENVS_PER_AGENT={result['ENVS_PER_AGENT']} TRAINING_MIN_BATCH_SIZE={result['TRAINING_MIN_BATCH_SIZE']} "
          f"PRECISION={result['PRECISION']} ({result['precision']}) NETWORK_TYPE={result['NETWORK_TYPE']} "
          f"device={result['device']} cpu={result['cpu_model']}")
    print(f"{'code':<26} {result['code']}")


def main(argv: list[str] | None = None) -> int:
    from ga3c.errors import ConfigError
    from ga3c.settings import parse_settings

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", action="append", default=[], help="a preset (configs/*.toml); repeatable")
    parser.add_argument("--game", help="the game id (ATARI_GAME)")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured training window (s)")
    parser.add_argument("--warmup", type=float, default=15.0, help="training time before the window (s)")
    parser.add_argument("--env-seconds", type=float, default=20.0, help="env-only measurement (s)")
    parser.add_argument("--dynamic", action="store_true", help="run with dynamic adjustment")
    parser.add_argument("--profile", action="store_true", help="show where the time goes, per component")
    parser.add_argument("--skip-env-only", action="store_true", help="measure the training run only")
    parser.add_argument("--env-once", action="store_true",
                        help="measure env-only before the training only, not also after it")
    parser.add_argument("--cluster", choices=["ray"], help="train with CLUSTER=ray (agent groups on Ray)")
    parser.add_argument("--compare", action="append", default=[], metavar="KEY=VALUE",
                        help="a second training run with this setting too (repeatable), measured after the first "
                             "in the same invocation: e.g. --compare NETWORK_TYPE=lstm")
    parser.add_argument("settings", nargs="*", help="KEY=VALUE settings, as for training")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%H:%M:%S")

    overrides = [f"--config={path}" for path in args.config]
    if args.game:
        overrides.append(f"ATARI_GAME={args.game}")
    overrides += ["SAVE_MODELS=False", "TENSORBOARD=False", "EPISODES=100000000", "PRINT_STATS_FREQUENCY=1000000",
                  f"DYNAMIC_SETTINGS={args.dynamic}", f"CLUSTER={args.cluster or ''}",
                  "RESULTS_FILENAME=" + os.path.join(tempfile.mkdtemp(prefix="ga3c-bench-"), "results.txt")]
    try:
        cfg = parse_settings(overrides + list(args.settings))
        compare_cfg = parse_settings(overrides + list(args.settings) + args.compare) if args.compare else None
    except ConfigError as exc:
        print(f"benchmark: error: {exc}", file=sys.stderr)
        return 2


    runs = [cfg] + ([compare_cfg] if args.compare else [])
    env_passes = 0 if args.skip_env_only else 1 if args.env_once else 2
    phases = len(runs) + env_passes
    phase = 0

    def env_pass(when: str) -> float:
        nonlocal phase
        phase += 1
        print(f"[{phase}/{phases}] env-only ({when}): {cfg.AGENTS} agents x {cfg.ENVS_PER_AGENT} envs, random "
              f"actions, {args.env_seconds:.0f} s", flush=True)
        return env_only(cfg, cfg.AGENTS, args.env_seconds)

    before = env_pass("before") if env_passes else None
    results = []
    for k, run_cfg in enumerate(runs, 1):
        extra = f" with {' '.join(args.compare)}" if k == 2 else ""
        phase += 1
        print(f"[{phase}/{phases}] training{extra}: {args.warmup:.0f} s warm-up, then {args.seconds:.0f} s "
              "measured", flush=True)
        result = measure_training(run_cfg, args)
        if result is None:
            return 1
        results.append(result)
    after = env_pass("after") if env_passes == 2 else None
    for result in results:
        add_env_only(result, before, after)
        print_table(result)
    result = results[0]
    if args.compare:
        result["compare"] = dict(results[1], settings=args.compare)
        result["compare_ratio"] = round(results[1]["train_steps_per_s"] / result["train_steps_per_s"], 3)
        print(f"\n{' '.join(args.compare)}: {result['compare_ratio']} of the first run's agent steps/s")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
