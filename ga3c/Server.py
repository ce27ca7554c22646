"""Server: owns the model, the shared buffers, the agents, predictors, trainers and the stats process.

The main loop anneals the learning rate and beta over ANNEALING_EPISODE_COUNT episodes (or ANNEALING_STEP_COUNT
agent steps), saves a checkpoint every SAVE_FREQUENCY episodes, replaces agent processes that died, and stops at
EPISODES, MAX_STEPS or MAX_SECONDS, on SIGINT/SIGTERM (from the start of the constructor on), or when a predictor,
trainer, the stats process or a checkpoint save fails. Shutdown goes in an order that loses nothing: the agents
send their partial rollouts and exit while the predictors and trainers still serve them, then the predictors stop,
the trainers train on what is left, the stats process records every episode the agents sent and ends, and a final
checkpoint (counting exactly the episodes in the results file) is written. Every step of it is bounded in time,
so nothing hangs.

Faults: an agent that dies (killed, or its environment raised) is noticed at the next tick (50 ms), logged in
one line and replaced. The experience slot it was filling, if any, is given back (see SharedBuffers), the
transitions it held and had not sent are counted as `discarded` in the summary, the reply pipe of a dead agent
is closed only seconds later and its id is not reused for a few seconds (a prediction it had asked for may still
be answered, and must reach nobody). If the server itself is killed, the agents and the stats process see their
pipes close and exit; the shared arrays have no name in /dev/shm, so nothing is left behind.
A full disk: a checkpoint that cannot be written stops the run with one error line and no final save (it would
fail the same way), so the last good checkpoint stays the latest; a results file that cannot be written stops it
too (the stats process says why, and the final checkpoint counts the lines kept); TensorBoard files that cannot be
written cost one warning line, and the run goes on.
"""

from __future__ import annotations

import fcntl
import logging
import multiprocessing as mp
import os
import select
import signal
import threading
import time
import traceback

import torch

from ga3c import SharedBuffers as sb
from ga3c.Checkpoint import TMP_SUFFIX, check_compatible, find_checkpoint, load_checkpoint, make_meta, save_checkpoint
from ga3c.Environment import probe_environment
from ga3c.errors import ConfigError
from ga3c.GameManager import resolve_game_id
from ga3c.NetworkVP import NetworkVP, network_kind, release_freed_memory, resolve_device, torch_threads
from ga3c.ProcessAgent import run_agent
from ga3c.ProcessStats import EXIT_RESULTS_FAILED, run_stats
from ga3c.settings import changed_settings, config_to_dict
from ga3c.ThreadDynamicAdjustment import ThreadDynamicAdjustment
from ga3c.ThreadPredictor import ThreadPredictor
from ga3c.ThreadTrainer import ThreadTrainer

log = logging.getLogger("ga3c")

AGENT_STOP_SECONDS = 5.0  # time the agents get to send their last rollouts before they are killed
AGENT_DEATH_WINDOW = 60  # seconds; more than AGENT_DEATHS_ALLOWED agent deaths in it stop the run (a crash loop)
AGENT_DEATHS_ALLOWED = 10
DEAD_ID_SECONDS = 5.0  # a dead agent's id and reply pipe stay unused this long (its last request may be answered)
TICK_SECONDS = 0.05  # period of the main loop
# Shutdown: what each step may take at most (the tests derive the worst case of a stop from these)
DYNAMIC_JOIN_SECONDS = 2.0  # the dynamic adjustment thread ends
RECOVERY_WRITE_SECONDS = 1.0  # per agent that ended: room for its recovery record in the experience pipe
PREDICTOR_JOIN_SECONDS = 2.0  # per predictor thread
TRAINER_JOIN_SECONDS = 5.0  # per trainer thread, training on what is left
STATS_JOIN_SECONDS = 5.0  # the stats process records the last episodes and ends, or is killed
STATS_KILL_SECONDS = 1.0  # the killed stats process is reaped


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


def remove_stale_temporaries(folder: str, name: str) -> None:
    """Removes the temporary files of checkpoint saves that a killed run left unfinished."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for entry in names:
        if entry.startswith(f".{name}_") and entry.endswith(TMP_SUFFIX):
            try:
                os.remove(os.path.join(folder, entry))
                log.info("removed %s, an unfinished checkpoint of an earlier run", os.path.join(folder, entry))
            except OSError:
                pass


class Server:
    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.stop_reason: str | None = None
        self.failed = False
        self._conns: list = []
        # SIGINT/SIGTERM from here on stop the run cleanly (main() then starts nothing); main() restores them
        self._old_handlers = {}
        if threading.current_thread() is threading.main_thread():
            self._old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._build(cfg)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Restores the signal handlers and closes the pipes (main() does it; for a Server never run)."""
        for s, handler in self._old_handlers.items():
            signal.signal(s, handler)
        self._old_handlers = {}
        for conn in self._conns:
            conn.close()

    def _pipe(self):
        reader, writer = self.ctx.Pipe(duplex=False)
        self._conns += [reader, writer]
        return reader, writer

    def _build(self, cfg) -> None:
        self.game_id, _, note = resolve_game_id(cfg.ATARI_GAME, cfg)
        if note:
            log.info(note)
        if cfg.SAVE_MODELS or cfg.LOAD_CHECKPOINT:
            check_writable(cfg.CHECKPOINT_DIR, "CHECKPOINT_DIR")
            remove_stale_temporaries(cfg.CHECKPOINT_DIR, cfg.NETWORK_NAME)
        if cfg.TENSORBOARD:
            check_writable(cfg.LOG_DIR, "LOG_DIR")
        check_writable(os.path.dirname(os.path.abspath(cfg.RESULTS_FILENAME)), "RESULTS_FILENAME's folder")
        log.info("settings other than Config.py's: %s",
                 " ".join(f"{k}={v}" for k, v in changed_settings(cfg).items()) or "none")
        state_shape, state_dtype, num_actions, is_atari = probe_environment(cfg)
        self.meta = make_meta(self.game_id, state_shape, num_actions, network_kind(cfg, state_shape))
        self.frames_per_step = cfg.FRAMESKIP if is_atari else 1
        self.ctx = mp.get_context("spawn")

        checkpoint = None
        if cfg.LOAD_CHECKPOINT:
            path = find_checkpoint(cfg.CHECKPOINT_DIR, cfg.NETWORK_NAME, cfg.LOAD_EPISODE)
            checkpoint = load_checkpoint(path)
            check_compatible(checkpoint, self.meta)
            log.info("resuming from %s (episode %d)", path, checkpoint["episode"])

        self.device = resolve_device(cfg.DEVICE)
        torch.set_num_threads(torch_threads(cfg, self.device))
        self.network = NetworkVP(cfg, tuple(state_shape), num_actions, self.device)
        counters = {"episodes": 0, "steps": 0, "updates": 0}
        if checkpoint is not None:
            self.network.set_state(checkpoint["network"])
            counters.update(checkpoint["counters"])
            truncate_results(cfg.RESULTS_FILENAME, int(counters["episodes"]))
        log.info("model: %s network, %d parameters, on %s, %s%s", self.meta["network"],
                 self.network.num_parameters(), self.device, self.network.precision,
                 f" (PRECISION='auto': {'native' if self.network.bf16 else 'no native'} bfloat16 here)"
                 if str(cfg.PRECISION).lower() == 'auto' else "")

        layout = sb.Layout(cfg.MAX_AGENTS, cfg.MAX_QUEUE_SIZE, cfg.ENVS_PER_AGENT, cfg.TIME_MAX, tuple(state_shape),
                           str(state_dtype), int(num_actions), self.network.recurrent_size)
        self.shared = sb.SharedBuffers(self.ctx, layout)
        c = self.shared.counters
        c[sb.C_EPISODES] = c[sb.C_EPISODES_BASE] = counters["episodes"]
        c[sb.C_STEPS_BASE] = counters["steps"]
        self.updates_base = int(counters["updates"]) - self.network.version
        self.saved_episodes = int(counters["episodes"])
        self.saved_version = self.network.version
        self.save_failed = False  # a checkpoint save of this run failed

        self.request_reader, self.request_writer = self._pipe()
        self.experience_reader, self.experience_writer = self._pipe()
        self.free_reader, self.free_writer = self._pipe()
        self.episode_reader, self.episode_writer = self._pipe()  # agents -> stats: finished episodes
        self.control_reader, self.control_writer = self._pipe()  # server -> stats: TensorBoard scalars, the end
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

        self.control_lock = threading.Lock()
        self.start_time = time.time()
        self.stats = self.ctx.Process(
            target=run_stats, name="ga3c-stats", daemon=True,
            args=(cfg, self.shared, self.episode_reader, self.control_reader, os.getpid(), self.start_time,
                  self.frames_per_step, cfg.RESULTS_FILENAME))
        self.stats_started = False

        self.agents: dict[int, tuple] = {}  # id -> (process, reply writer)
        self.retiring: dict[int, tuple] = {}  # agents told to stop, not yet exited
        self.incarnations = 0
        self.agent_deaths: list[float] = []
        self.deaths = 0  # agents that died in this run
        self.replacements_due = 0  # dead agents not yet replaced (no id free)
        self.dead_ids: dict[int, float] = {}  # id of an agent that died -> when it may be used again
        self.closing: list[tuple[float, object]] = []  # (when, reply writer) of reaped agents, closed later
        # when the heaps' free pages next go back to the system (cfg.TRIM_SECONDS; never with 0)
        self.next_trim = time.time() + cfg.TRIM_SECONDS if cfg.TRIM_SECONDS > 0 else float('inf')
        self.reply_fds: list[int] = [-1] * cfg.MAX_AGENTS
        # what the trainers' reader saw of each agent id (all incarnations): rollouts announced, transitions sent
        # (the extra id MAX_AGENTS is the Ray agent groups', see ga3c/ray_cluster.py: it never dies)
        self.announced = [0] * (cfg.MAX_AGENTS + 1)
        self.sent = [0] * (cfg.MAX_AGENTS + 1)
        self.cluster = None  # the Ray agent groups (CLUSTER='ray')
        self.recoveries: dict[int, tuple[int, int, int, int]] = {}  # number -> (agent, slot, slots taken, steps)
        self.recovery_number = 0
        self.predictors: list[ThreadPredictor] = []
        self.trainers: list[ThreadTrainer] = []
        self._anneal()
        self.last_scalars_update = -1
        # trainer threads report concurrently: the version is read, checked and sent under one lock, so that the
        # points reach TensorBoard in the order of their update counts
        self.scalars_lock = threading.Lock()

    # ------------------------------------------------------------------ components
    def add_agent(self) -> bool:
        """Starts an agent with the lowest free id; False when every id is in use (or was a dead agent's
        moments ago)."""
        now = time.time()
        self.dead_ids = {i: until for i, until in self.dead_ids.items() if until > now}
        taken = set(self.agents) | set(self.retiring) | set(self.dead_ids)
        agent_id = next((i for i in range(self.cfg.MAX_AGENTS) if i not in taken), None)
        if agent_id is None:
            return False
        self.shared.stop[agent_id] = 0
        reply_reader, reply_writer = self.ctx.Pipe(duplex=False)
        self.incarnations += 1
        proc = self.ctx.Process(
            target=run_agent, name=f"ga3c-agent-{agent_id}", daemon=True,
            args=(agent_id, self.incarnations, self.cfg, self.shared, self.request_writer, reply_reader,
                  self.free_reader, self.experience_writer, self.episode_writer))
        try:
            proc.start()
        finally:
            reply_reader.close()
        self.reply_fds[agent_id] = reply_writer.fileno()
        self.agents[agent_id] = (proc, reply_writer)
        return True

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

    def agent_ids(self) -> list[int]:
        """The ids of the agents running now (a replacement of a dead agent included)."""
        with self.components_lock:
            return list(self.agents)

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
            self.replacements_due = 0  # the count asked for now includes them
            while len(self.agents) < agents and self.stop_reason is None:
                if not self.add_agent():
                    break
            while len(self.agents) > agents:
                self.remove_agent()
            c = self.shared.counters
            c[sb.C_NT], c[sb.C_NP], c[sb.C_NA] = len(self.trainers), len(self.predictors), len(self.agents)

    def next_experience(self, wait: bool) -> tuple[int, int, int] | None:
        """One rollout record (agent, slot, steps) from the experience pipe, or None (after 50 ms if `wait`).
        Recovery records of dead agents are handled here and never returned."""
        envs = self.shared.layout.envs
        with self.experience_lock:
            while True:
                if wait and not select.select([self.experience_fd], [], [], 0.05)[0]:
                    return None
                try:
                    data = os.read(self.experience_fd, sb.EXPERIENCE.size)
                except BlockingIOError:
                    return None
                if len(data) != sb.EXPERIENCE.size:
                    return None
                agent, slot, steps = sb.EXPERIENCE.unpack(data)
                if agent >= 0:
                    self.announced[agent] += 1
                    self.sent[agent] += steps * envs
                    return agent, slot, steps
                self._recover(slot)

    def _dead_agent(self, agent_id: int) -> None:
        """Called once an agent's process has ended: queues the accounting of what it held behind every
        rollout it announced (see _recover)."""
        sh = self.shared
        number = self.recovery_number
        self.recovery_number += 1
        self.recoveries[number] = (agent_id, int(sh.agent_slot[agent_id]), int(sh.agent_taken[agent_id]),
                                   int(sh.agent_steps[agent_id]))
        sh.agent_slot[agent_id] = -1
        fd = self.experience_writer.fileno()
        # never block the main loop (no trainer left to read)
        if select.select([], [fd], [], RECOVERY_WRITE_SECONDS)[1]:
            os.write(fd, sb.EXPERIENCE.pack(-1, number, 0))
        # otherwise it stays in self.recoveries, for _drain_experience

    def _recover(self, number: int) -> None:
        """A dead agent's recovery record, read after every rollout the agent announced: gives back the slot it
        took and did not announce, and counts the transitions it held as discarded."""
        agent_id, slot, taken, steps = self.recoveries.pop(number)
        c = self.shared.counters
        if slot >= 0 and self.announced[agent_id] < taken:
            self.release_slot(slot)
            with self.counter_lock:
                c[sb.C_RECOVERED] += 1
            log.info("agent %d died holding experience slot %d: given back", agent_id, slot)
        discarded = steps - self.sent[agent_id]
        self.sent[agent_id], self.announced[agent_id] = steps, taken  # the id's next agent starts even
        if discarded:
            with self.counter_lock:
                c[sb.C_DISCARDED] += discarded

    def _drain_experience(self) -> None:
        """After the trainers ended: accounts for every record still queued (none, unless a trainer failed)."""
        left = 0
        while (record := self.next_experience(wait=False)) is not None:
            left += record[2] * self.shared.layout.envs
            self.release_slot(record[1])
        for number in list(self.recoveries):
            self._recover(number)
        if left:
            log.error("%d transitions were never trained on (no trainer left to take them)", left)

    def component_failed(self, name: str, exc: BaseException) -> None:
        log.error("%s failed, stopping the run:\n%s", name, "".join(traceback.format_exception(exc)).rstrip())
        self.failed = True
        self.request_stop(f"{name} failed")

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason

    def training_scalars(self, scalars: dict, lag_mean: float, lag_max: int) -> None:
        """Sends the losses to TensorBoard every TENSORBOARD_UPDATE_FREQUENCY updates (keyed by agent steps)."""
        if not self.cfg.TENSORBOARD:
            return
        with self.scalars_lock:
            updates = self.network.version
            if updates // self.cfg.TENSORBOARD_UPDATE_FREQUENCY == self.last_scalars_update:
                return
            self.last_scalars_update = updates // self.cfg.TENSORBOARD_UPDATE_FREQUENCY
            out = {f"train/{k}": float(v) for k, v in scalars.items()}
            out.update({"train/learning_rate": self.learning_rate, "train/beta": self.beta,
                        "train/policy_lag_mean": lag_mean, "train/policy_lag_max": lag_max,
                        "train/updates": updates + self.updates_base})
            self._to_stats(("train", self.total_steps(), out))

    def _to_stats(self, item) -> None:
        with self.control_lock:
            try:
                self.control_writer.send(item)
            except OSError:
                pass  # the stats process died; the main loop stops the run

    # ------------------------------------------------------------------ counters
    def total_steps(self) -> int:
        c = self.shared.counters
        return int(self.shared.agent_steps.sum() + c[sb.C_CLUSTER_STEPS] + c[sb.C_STEPS_BASE])

    def episodes(self) -> int:
        return int(self.shared.counters[sb.C_EPISODES])

    def save(self) -> str:
        """Writes a checkpoint of now (atomically); raises on failure."""
        episodes = self.episodes()
        state = self.network.get_state()
        version = state["version"]  # the weights' own count: trainers may update while the counters are read
        counters = {"episodes": episodes, "steps": self.total_steps(), "updates": version + self.updates_base}
        path = save_checkpoint(self.cfg.CHECKPOINT_DIR, self.cfg.NETWORK_NAME, episodes, state, counters,
                               config_to_dict(self.cfg), self.meta)
        self.saved_episodes = episodes
        self.saved_version = version
        log.info("saved %s", path)
        return path

    def _try_save(self, when: str) -> bool:
        """save(), turning a failure (disk full, folder read-only or gone) into one error line and a failed run."""
        try:
            self.save()
            return True
        except Exception as exc:  # noqa: BLE001 - OSError, or torch's RuntimeError from a failed write
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.error("the %s checkpoint could not be written to '%s': %s", when, self.cfg.CHECKPOINT_DIR, first)
            self.failed = True
            self.save_failed = True
            self.request_stop("a checkpoint could not be written")
            return False

    # ------------------------------------------------------------------ main loop
    def _on_signal(self, signum, _frame) -> None:
        self.request_stop(signal.Signals(signum).name)

    def _anneal(self) -> None:
        """The learning rate and beta of the current episode count, or agent step count with
        ANNEALING_STEP_COUNT (a resumed run continues the schedule: both counters come back)."""
        cfg = self.cfg
        if cfg.ANNEALING_STEP_COUNT:
            progress = min(self.total_steps(), cfg.ANNEALING_STEP_COUNT) / cfg.ANNEALING_STEP_COUNT
        else:
            progress = min(self.episodes(), cfg.ANNEALING_EPISODE_COUNT) / cfg.ANNEALING_EPISODE_COUNT
        self.learning_rate = cfg.LEARNING_RATE_START + (cfg.LEARNING_RATE_END - cfg.LEARNING_RATE_START) * progress
        self.beta = cfg.BETA_START + (cfg.BETA_END - cfg.BETA_START) * progress

    def _tick(self) -> None:
        cfg = self.cfg
        episodes = self.episodes()
        self._anneal()
        if episodes >= cfg.EPISODES:
            self.request_stop(f"EPISODES={cfg.EPISODES} reached")
        if cfg.MAX_STEPS and self.total_steps() >= cfg.MAX_STEPS:
            self.request_stop(f"MAX_STEPS={cfg.MAX_STEPS} reached")
        if cfg.MAX_SECONDS and time.time() - self.start_time >= cfg.MAX_SECONDS:
            self.request_stop(f"MAX_SECONDS={cfg.MAX_SECONDS} reached")
        if (cfg.SAVE_MODELS and self.stop_reason is None
                and episodes // cfg.SAVE_FREQUENCY > self.saved_episodes // cfg.SAVE_FREQUENCY):
            self._try_save("periodic")
        if not self.stats.is_alive() and self.stop_reason is None:  # before the agents, which die with it
            if self.stats.exitcode == EXIT_RESULTS_FAILED:  # it said why in one line
                self.request_stop("the results file could not be written")
            else:
                log.error("the stats process died (exit code %s); stopping", self.stats.exitcode)
                self.request_stop("the stats process died")
            self.failed = True
        self._reap_agents()
        now = time.time()
        while self.closing and self.closing[0][0] <= now:
            self.closing.pop(0)[1].close()
        if now >= self.next_trim:
            release_freed_memory()
            self.next_trim = now + self.cfg.TRIM_SECONDS

    def _ended(self, agent_id: int, proc, writer) -> None:
        """Bookkeeping for an agent process that has ended, whichever way."""
        proc.join()
        self.reply_fds[agent_id] = -1
        self.closing.append((time.time() + DEAD_ID_SECONDS, writer))  # a late reply must not find the fd reused
        self._dead_agent(agent_id)

    def _reap_agents(self) -> None:
        with self.components_lock:
            for agent_id, (proc, writer) in list(self.retiring.items()):
                if proc.exitcode is not None:
                    del self.retiring[agent_id]
                    self._ended(agent_id, proc, writer)
            for agent_id, (proc, writer) in list(self.agents.items()):
                if proc.exitcode is not None:
                    del self.agents[agent_id]
                    self._ended(agent_id, proc, writer)
                    self.dead_ids[agent_id] = time.time() + DEAD_ID_SECONDS
                    self.deaths += 1
                    if self.stop_reason is not None:
                        continue
                    now = time.time()
                    self.agent_deaths = [t for t in self.agent_deaths if now - t < AGENT_DEATH_WINDOW] + [now]
                    if len(self.agent_deaths) > AGENT_DEATHS_ALLOWED:
                        log.error("agent %d exited with code %s, the %d-th agent death in %d s: agents cannot run "
                                  "(see the errors above); stopping", agent_id, proc.exitcode,
                                  len(self.agent_deaths), AGENT_DEATH_WINDOW)
                        self.failed = True
                        self.request_stop("agents keep dying")
                        continue
                    log.warning("agent %d exited with code %s; starting a replacement", agent_id, proc.exitcode)
                    self.replacements_due += 1
            while self.replacements_due and self.stop_reason is None and self.add_agent():
                self.replacements_due -= 1
            c = self.shared.counters
            c[sb.C_NA] = len(self.agents)

    def main(self) -> int:
        """Runs until a stop condition; returns the exit status (0, or 1 when a component failed)."""
        dynamic = None
        try:
            if self.stop_reason is None:  # not interrupted while it was being built
                self.stats.start()
                self.stats_started = True
                self.episode_reader.close()  # the stats process holds it: its death then breaks the agents' pipe
                self.control_reader.close()
                dynamic = ThreadDynamicAdjustment(self)
                dynamic.start()
                if self.cfg.CLUSTER == 'ray':
                    from ga3c.ray_cluster import ThreadRayAgents

                    self.cluster = ThreadRayAgents(self)
                    self.cluster.start()
            while self.stop_reason is None:
                time.sleep(TICK_SECONDS)
                self._tick()
        except Exception as exc:  # noqa: BLE001 - logged, and the run still ends in order
            log.error("the server failed, stopping the run:\n%s", "".join(traceback.format_exception(exc)).rstrip())
            self.failed = True
        finally:
            log.info("stopping: %s", self.stop_reason or "error")
            self.request_stop("shutdown")
            try:
                self._shutdown(dynamic)
            finally:
                self.close()
        return 1 if self.failed else 0

    def _summary(self) -> None:
        """One line that accounts for every transition the agents produced in this run."""
        c = self.shared.counters
        produced = int(self.shared.agent_steps.sum() + c[sb.C_CLUSTER_STEPS])
        trained, dropped, discarded = int(c[sb.C_TRAINED]), int(c[sb.C_DROPPED]), int(c[sb.C_DISCARDED])
        seconds = time.time() - self.start_time
        lag_mean = c[sb.C_LAG_SUM] / trained if trained else 0.0
        lag_max = c[sb.C_LAG_MAX] if trained else 0.0
        log.info("summary: episodes=%d steps=%d updates=%d seconds=%.1f steps_per_s=%.0f transitions produced=%d "
                 "trained=%d dropped=%d discarded=%d lost=%d agent_deaths=%d slots_recovered=%d "
                 "policy_lag_mean=%.2f policy_lag_max=%d", self.episodes(), self.total_steps(),
                 self.network.version + self.updates_base, seconds, produced / seconds, produced, trained, dropped,
                 discarded, produced - trained - dropped - discarded, self.deaths, int(c[sb.C_RECOVERED]), lag_mean,
                 int(lag_max))

    def _shutdown(self, dynamic) -> None:
        if dynamic is not None:
            dynamic.stop()
            dynamic.join(timeout=DYNAMIC_JOIN_SECONDS)
        with self.components_lock:
            while self.agents:
                self.remove_agent()
        # an agent ends only after a prediction (and, holding a rollout, a free slot): without a predictor or a
        # trainer left it cannot, and is killed at once
        served = any(t.is_alive() for t in self.predictors) and any(t.is_alive() for t in self.trainers)
        deadline = time.time() + (AGENT_STOP_SECONDS if served else 0.0)
        while self.retiring and time.time() < deadline:
            self._reap_agents()
            time.sleep(0.02)
        for agent_id, (proc, writer) in list(self.retiring.items()):
            if proc.exitcode is None:
                log.warning("agent %d did not stop in time; killing it", agent_id)
                proc.kill()
            del self.retiring[agent_id]
            self._ended(agent_id, proc, writer)
        if self.cluster is not None:  # its rollouts in flight go to the trainers, then its actors are killed
            self.cluster.stop()
        for thread in self.predictors:
            thread.exit_flag = True
        for thread in self.predictors:
            thread.join(timeout=PREDICTOR_JOIN_SECONDS)
        for thread in self.trainers:
            thread.drain = True
            thread.exit_flag = True
        for thread in self.trainers:
            thread.join(timeout=TRAINER_JOIN_SECONDS)
        self._drain_experience()
        if self.stats_started:  # every agent has ended: the stats process records what they sent, then ends
            self._to_stats(None)
            self.stats.join(timeout=STATS_JOIN_SECONDS)
            if self.stats.is_alive():
                log.warning("the stats process did not end in time; killing it")
                self.stats.kill()
                self.stats.join(timeout=STATS_KILL_SECONDS)
        changed = self.network.version != self.saved_version or self.episodes() != self.saved_episodes
        # after a failed save (disk full, folder gone) another would fail the same way: the last good one stays
        if self.cfg.SAVE_MODELS and self.cfg.TRAIN_MODELS and changed and not self.save_failed:
            self._try_save("final")
        self._summary()
        for _, writer in self.closing:
            writer.close()
        self.closing = []
