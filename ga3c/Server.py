"""Server: owns the model, the shared buffers, the agents, predictors, trainers and the stats process.

The main loop anneals the learning rate and beta over ANNEALING_EPISODE_COUNT episodes, saves a checkpoint
every SAVE_FREQUENCY episodes, replaces agent processes that died, and stops at EPISODES, MAX_STEPS or
MAX_SECONDS, on SIGINT/SIGTERM, or when a predictor or trainer fails. Shutdown goes in an order that loses
nothing: the agents send their partial rollouts and exit while the predictors and trainers still serve them,
then the predictors stop, the trainers train on what is left, a final checkpoint is written, and the stats
process flushes the results file and ends. Every step of it is bounded in time, so nothing hangs.
"""

from __future__ import annotations

import fcntl
import logging
import multiprocessing as mp
import os
import signal
import threading
import time
import traceback

import torch

from ga3c import SharedBuffers as sb
from ga3c.Checkpoint import check_compatible, find_checkpoint, load_checkpoint, save_checkpoint
from ga3c.Environment import probe_environment
from ga3c.errors import ConfigError
from ga3c.GameManager import resolve_game_id
from ga3c.NetworkVP import NetworkVP, resolve_device
from ga3c.ProcessAgent import run_agent
from ga3c.ProcessStats import run_stats
from ga3c.settings import config_to_dict
from ga3c.ThreadDynamicAdjustment import ThreadDynamicAdjustment
from ga3c.ThreadPredictor import ThreadPredictor
from ga3c.ThreadTrainer import ThreadTrainer

log = logging.getLogger("ga3c")

AGENT_STOP_SECONDS = 5.0  # time the agents get to send their last rollouts before they are killed
AGENT_DEATH_WINDOW = 60  # seconds; more than AGENT_DEATHS_ALLOWED agent deaths in it stop the run (a crash loop)
AGENT_DEATHS_ALLOWED = 10


def check_writable(folder: str, setting: str) -> None:
    """Creates `folder` and proves it writable now, rather than failing at the first save an hour later."""
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".ga3c-write-test-{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as exc:
        raise ConfigError(f"{setting} '{folder}' is not writable ({exc.strerror}); choose another folder with "
                          f"{setting}=PATH") from exc


def truncate_results(path: str, episodes: int) -> None:
    """Keeps the first `episodes` complete lines of the results file: the episodes the checkpoint knows of."""
    if not os.path.exists(path):
        return
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    kept = [line for line in lines if line][:episodes]
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"".join(line + b"\n" for line in kept))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class Server:
    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.stop_reason: str | None = None
        self.failed = False
        self.game_id, _, note = resolve_game_id(cfg.ATARI_GAME, cfg)
        if note:
            log.info(note)
        if cfg.SAVE_MODELS or cfg.LOAD_CHECKPOINT:
            check_writable(cfg.CHECKPOINT_DIR, "CHECKPOINT_DIR")
        if cfg.TENSORBOARD:
            check_writable(cfg.LOG_DIR, "LOG_DIR")
        check_writable(os.path.dirname(os.path.abspath(cfg.RESULTS_FILENAME)), "RESULTS_FILENAME's folder")
        state_shape, state_dtype, num_actions, is_atari = probe_environment(cfg)
        self.meta = {"game": self.game_id, "state_shape": list(state_shape), "num_actions": int(num_actions),
                     "network": "cnn" if len(state_shape) == 3 else "mlp"}
        self.frames_per_step = cfg.FRAMESKIP if is_atari else 1

        checkpoint = None
        if cfg.LOAD_CHECKPOINT:
            path = find_checkpoint(cfg.CHECKPOINT_DIR, cfg.NETWORK_NAME, cfg.LOAD_EPISODE)
            checkpoint = load_checkpoint(path)
            check_compatible(checkpoint, self.meta)
            log.info("resuming from %s (episode %d)", path, checkpoint["episode"])

        self.device = resolve_device(cfg.DEVICE)
        # On a CPU, several predictor and trainer threads share the cores with the agents: one torch thread each
        # avoids OpenMP pools spinning against each other (measured: 8-9x more steps/s than torch's default).
        torch.set_num_threads(cfg.TORCH_THREADS if cfg.TORCH_THREADS > 0 else
                              (1 if self.device.type == "cpu" else torch.get_num_threads()))
        self.network = NetworkVP(cfg, tuple(state_shape), num_actions, self.device)
        counters = {"episodes": 0, "steps": 0, "updates": 0}
        if checkpoint is not None:
            self.network.set_state(checkpoint["network"])
            counters.update(checkpoint["counters"])
            truncate_results(cfg.RESULTS_FILENAME, int(counters["episodes"]))
        log.info("model: %s network, %d parameters, on %s, %s", self.meta["network"],
                 self.network.num_parameters(), self.device, cfg.PRECISION)

        self.ctx = mp.get_context("spawn")
        layout = sb.Layout(cfg.MAX_AGENTS, cfg.MAX_QUEUE_SIZE, cfg.ENVS_PER_AGENT, cfg.TIME_MAX, tuple(state_shape),
                           str(state_dtype), int(num_actions))
        self.shared = sb.SharedBuffers(self.ctx, layout)
        c = self.shared.counters
        c[sb.C_EPISODES] = c[sb.C_EPISODES_BASE] = counters["episodes"]
        c[sb.C_STEPS_BASE] = counters["steps"]
        self.updates_base = int(counters["updates"]) - self.network.version
        self.saved_episodes = int(counters["episodes"])

        self.request_reader, self.request_writer = self.ctx.Pipe(duplex=False)
        self.experience_reader, self.experience_writer = self.ctx.Pipe(duplex=False)
        self.free_reader, self.free_writer = self.ctx.Pipe(duplex=False)
        for slot in range(layout.slots):
            os.write(self.free_writer.fileno(), sb.SLOT.pack(slot))
        self.request_fd = self.request_reader.fileno()
        self.experience_fd = self.experience_reader.fileno()
        for fd in (self.request_fd, self.experience_fd):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        self.request_lock = threading.Lock()
        self.experience_lock = threading.Lock()
        self.counter_lock = threading.Lock()
        self.components_lock = threading.RLock()

        self.stats_queue = self.ctx.Queue()
        self.start_time = time.time()
        self.stats = self.ctx.Process(
            target=run_stats, name="ga3c-stats", daemon=True,
            args=(cfg, self.shared, self.stats_queue, self.start_time, self.frames_per_step, cfg.RESULTS_FILENAME))

        self.agents: dict[int, tuple] = {}  # id -> (process, reply writer)
        self.retiring: dict[int, tuple] = {}  # agents told to stop, not yet exited
        self.incarnations = 0
        self.agent_deaths: list[float] = []
        self.reply_fds: list[int] = [-1] * cfg.MAX_AGENTS
        self.predictors: list[ThreadPredictor] = []
        self.trainers: list[ThreadTrainer] = []
        self.learning_rate = cfg.LEARNING_RATE_START
        self.beta = cfg.BETA_START
        self.last_scalars_update = -1

    # ------------------------------------------------------------------ components
    def add_agent(self) -> None:
        taken = set(self.agents) | set(self.retiring)
        agent_id = next(i for i in range(self.cfg.MAX_AGENTS) if i not in taken)
        self.shared.stop[agent_id] = 0
        reply_reader, reply_writer = self.ctx.Pipe(duplex=False)
        self.incarnations += 1
        proc = self.ctx.Process(
            target=run_agent, name=f"ga3c-agent-{agent_id}", daemon=True,
            args=(agent_id, self.incarnations, self.cfg, self.shared, self.request_writer, reply_reader,
                  self.free_reader, self.experience_writer, self.stats_queue))
        proc.start()
        reply_reader.close()
        self.reply_fds[agent_id] = reply_writer.fileno()
        self.agents[agent_id] = (proc, reply_writer)

    def remove_agent(self) -> None:
        """Tells the newest agent to send what it holds and exit; it is reaped by the main loop."""
        agent_id = max(self.agents)
        self.shared.stop[agent_id] = 1
        self.retiring[agent_id] = self.agents.pop(agent_id)

    def release_slot(self, slot: int) -> None:
        """Gives an experience slot back to the agents once a trainer has copied it."""
        os.write(self.free_writer.fileno(), sb.SLOT.pack(slot))

    def reply(self, agent_id: int) -> None:
        try:
            os.write(self.reply_fds[agent_id], b"\x01")
        except OSError:
            pass  # the agent died; the main loop replaces it

    def counts(self) -> tuple[int, int, int]:
        return len(self.trainers), len(self.predictors), len(self.agents)

    def set_counts(self, trainers: int, predictors: int, agents: int) -> None:
        with self.components_lock:
            if self.stop_reason is not None:
                return
            while len(self.trainers) < trainers:
                self.trainers.append(ThreadTrainer(self, len(self.trainers)))
                self.trainers[-1].start()
            while len(self.trainers) > trainers:
                self.trainers.pop().exit_flag = True
            while len(self.predictors) < predictors:
                self.predictors.append(ThreadPredictor(self, len(self.predictors)))
                self.predictors[-1].start()
            while len(self.predictors) > predictors:
                self.predictors.pop().exit_flag = True
            while len(self.agents) < agents:
                self.add_agent()
            while len(self.agents) > agents:
                self.remove_agent()
            c = self.shared.counters
            c[sb.C_NT], c[sb.C_NP], c[sb.C_NA] = len(self.trainers), len(self.predictors), len(self.agents)

    def next_experience(self, wait: bool) -> tuple[int, int, int] | None:
        """One rollout record (agent, slot, steps) from the experience pipe, or None (after 50 ms if `wait`)."""
        import select

        with self.experience_lock:
            if wait and not select.select([self.experience_fd], [], [], 0.05)[0]:
                return None
            try:
                data = os.read(self.experience_fd, sb.EXPERIENCE.size)
            except BlockingIOError:
                return None
        return sb.EXPERIENCE.unpack(data)

    def component_failed(self, name: str, exc: BaseException) -> None:
        log.error("%s failed, stopping the run:\n%s", name, "".join(traceback.format_exception(exc)))
        self.failed = True
        self.request_stop(f"{name} failed")

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason

    def training_scalars(self, scalars: dict, lag_mean: float, lag_max: int) -> None:
        """Sends the losses to TensorBoard every TENSORBOARD_UPDATE_FREQUENCY updates (keyed by agent steps)."""
        if not self.cfg.TENSORBOARD:
            return
        updates = self.network.version
        if updates // self.cfg.TENSORBOARD_UPDATE_FREQUENCY == self.last_scalars_update:
            return
        self.last_scalars_update = updates // self.cfg.TENSORBOARD_UPDATE_FREQUENCY
        out = {f"train/{k}": float(v) for k, v in scalars.items()}
        out.update({"train/learning_rate": self.learning_rate, "train/beta": self.beta,
                    "train/policy_lag_mean": lag_mean, "train/policy_lag_max": lag_max,
                    "train/updates": updates + self.updates_base})
        self.stats_queue.put(("train", self.total_steps(), out))

    # ------------------------------------------------------------------ counters
    def total_steps(self) -> int:
        return int(self.shared.agent_steps.sum() + self.shared.counters[sb.C_STEPS_BASE])

    def episodes(self) -> int:
        return int(self.shared.counters[sb.C_EPISODES])

    def save(self) -> str:
        episodes = self.episodes()
        counters = {"episodes": episodes, "steps": self.total_steps(),
                    "updates": self.network.version + self.updates_base}
        path = save_checkpoint(self.cfg.CHECKPOINT_DIR, self.cfg.NETWORK_NAME, episodes, self.network.get_state(),
                               counters, config_to_dict(self.cfg), self.meta)
        self.saved_episodes = episodes
        log.info("saved %s", path)
        return path

    # ------------------------------------------------------------------ main loop
    def _on_signal(self, signum, _frame) -> None:
        self.request_stop(signal.Signals(signum).name)

    def _tick(self) -> None:
        cfg = self.cfg
        episodes = self.episodes()
        progress = min(episodes, cfg.ANNEALING_EPISODE_COUNT) / cfg.ANNEALING_EPISODE_COUNT
        self.learning_rate = cfg.LEARNING_RATE_START + (cfg.LEARNING_RATE_END - cfg.LEARNING_RATE_START) * progress
        self.beta = cfg.BETA_START + (cfg.BETA_END - cfg.BETA_START) * progress
        if episodes >= cfg.EPISODES:
            self.request_stop(f"EPISODES={cfg.EPISODES} reached")
        if cfg.MAX_STEPS and self.total_steps() >= cfg.MAX_STEPS:
            self.request_stop(f"MAX_STEPS={cfg.MAX_STEPS} reached")
        if cfg.MAX_SECONDS and time.time() - self.start_time >= cfg.MAX_SECONDS:
            self.request_stop(f"MAX_SECONDS={cfg.MAX_SECONDS} reached")
        if (cfg.SAVE_MODELS and self.stop_reason is None
                and episodes // cfg.SAVE_FREQUENCY > self.saved_episodes // cfg.SAVE_FREQUENCY):
            self.save()
        self._reap_agents()
        if not self.stats.is_alive() and self.stop_reason is None:
            self.failed = True
            self.request_stop("the stats process died")

    def _reap_agents(self) -> None:
        with self.components_lock:
            for agent_id, (proc, writer) in list(self.retiring.items()):
                if proc.exitcode is not None:
                    proc.join()
                    writer.close()
                    del self.retiring[agent_id]
            if self.stop_reason is not None:
                return
            for agent_id, (proc, writer) in list(self.agents.items()):
                if proc.exitcode is not None:
                    proc.join()
                    writer.close()
                    del self.agents[agent_id]
                    now = time.time()
                    self.agent_deaths = [t for t in self.agent_deaths if now - t < AGENT_DEATH_WINDOW] + [now]
                    if len(self.agent_deaths) > AGENT_DEATHS_ALLOWED:
                        log.error("agent %d exited with code %s, the %d-th agent death in %d s: agents cannot run "
                                  "(see the errors above); stopping", agent_id, proc.exitcode,
                                  len(self.agent_deaths), AGENT_DEATH_WINDOW)
                        self.failed = True
                        self.request_stop("agents keep dying")
                        return
                    log.warning("agent %d exited with code %s; starting a replacement", agent_id, proc.exitcode)
                    self.add_agent()

    def main(self) -> int:
        """Runs until a stop condition; returns the exit status (0, or 1 when a component failed)."""
        old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        dynamic = None
        try:
            self.stats.start()
            dynamic = ThreadDynamicAdjustment(self)
            dynamic.start()
            while self.stop_reason is None:
                time.sleep(0.05)
                self._tick()
        finally:
            log.info("stopping: %s", self.stop_reason or "error")
            self.request_stop("shutdown")
            self._shutdown(dynamic)
            for s, handler in old_handlers.items():
                signal.signal(s, handler)
        return 1 if self.failed else 0

    def _summary(self) -> None:
        """One line that accounts for every transition the agents produced in this run."""
        c = self.shared.counters
        produced = int(self.shared.agent_steps.sum())
        trained, dropped = int(c[sb.C_TRAINED]), int(c[sb.C_DROPPED])
        seconds = time.time() - self.start_time
        log.info("summary: episodes=%d steps=%d updates=%d seconds=%.1f steps_per_s=%.0f transitions produced=%d "
                 "trained=%d dropped=%d lost=%d", self.episodes(), self.total_steps(),
                 self.network.version + self.updates_base, seconds, produced / seconds, produced, trained, dropped,
                 produced - trained - dropped)

    def _shutdown(self, dynamic) -> None:
        if dynamic is not None:
            dynamic.stop()
            dynamic.join(timeout=2)
        with self.components_lock:
            while self.agents:
                self.remove_agent()
        deadline = time.time() + AGENT_STOP_SECONDS
        while self.retiring and time.time() < deadline:
            self._reap_agents()
            time.sleep(0.02)
        for agent_id, (proc, writer) in list(self.retiring.items()):
            log.warning("agent %d did not stop in time; killing it", agent_id)
            proc.kill()
            proc.join(timeout=1)
            writer.close()
            del self.retiring[agent_id]
        for thread in self.predictors:
            thread.exit_flag = True
        for thread in self.predictors:
            thread.join(timeout=2)
        for thread in self.trainers:
            thread.exit_flag = True
        for thread in self.trainers:
            thread.join(timeout=5)
        if self.cfg.SAVE_MODELS and self.cfg.TRAIN_MODELS:
            try:
                self.save()
            except OSError as exc:
                log.error("the final checkpoint could not be written: %s", exc)
                self.failed = True
        self.stats_queue.put(None)
        self.stats.join(timeout=5)
        self._summary()
        if self.stats.is_alive():
            self.stats.kill()
            self.stats.join(timeout=1)
        self.stats_queue.close()
        self.stats_queue.join_thread()
        for conn in (self.request_reader, self.request_writer, self.experience_reader, self.experience_writer,
                     self.free_reader, self.free_writer):
            conn.close()
