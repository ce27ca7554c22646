"""ThreadDynamicAdjustment: creates the initial components, then hill-climbs (trainers, predictors, agents), and
the number of Ray agent groups too with CLUSTER='ray'.

As the original: after DYNAMIC_SETTINGS_INITIAL_WAIT, draw a change of -1/0/+1 for each count, apply it, measure,
and go back if it did worse. Unlike the original, both settings are measured over equal windows of
DYNAMIC_SETTINGS_STEP_WAIT seconds (after a short settling time), a setting it returns to is measured again
instead of trusting an old figure, and the objective is trained samples per second (the work that counts),
not training updates (whose size varies with the batch). With DYNAMIC_SETTINGS_MARGIN above 0, a change is kept
only when two windows in a row beat the current setting by more than that fraction: one 20-s window varies by
about 10% on two cores, and the original's rule (keep any gain seen once) then walks the counts about at random.
With DYNAMIC_SETTINGS_HOLD_MAX above 1, each undone change doubles the windows (up to that many) over which the
setting it went back to is measured before the next trial, and a kept change resets them to one: half the
original's windows measure a trial setting, most of them worse than the current one once the counts have settled.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from ga3c import SharedBuffers as sb


class ThreadDynamicAdjustment(threading.Thread):
    def __init__(self, server) -> None:
        super().__init__(name="dynamic-adjustment", daemon=True)
        self.server = server
        cfg = server.cfg
        self.rng = np.random.default_rng(cfg.SEED + 7)
        self.stop_event = threading.Event()
        self.limits = (cfg.MAX_TRAINERS, cfg.MAX_PREDICTORS, cfg.MAX_AGENTS, cfg.CLUSTER_MAX_AGENT_GROUPS)
        server.set_counts(cfg.TRAINERS, cfg.PREDICTORS, cfg.AGENTS)

    def state(self) -> tuple[int, ...]:
        """(trainers, predictors, agents), plus the Ray agent groups with CLUSTER='ray'."""
        cluster = self.server.cluster
        return self.server.counts() + ((cluster.group_count(),) if cluster is not None else ())

    def apply(self, state: tuple[int, ...]) -> None:
        self.server.set_counts(*state[:3])
        if len(state) > 3:
            self.server.cluster.set_groups(state[3])

    def stop(self) -> None:
        self.stop_event.set()

    def measure(self) -> float | None:
        """Trained samples per second over one window after settling; None when stopped meanwhile.

        Settling lasts at least min(3, STEP_WAIT / 4) s, and until every agent running has stepped (at most
        STEP_WAIT s more): an agent started by the change (or replacing a dead one) spends seconds importing and
        making its environments, and a window that counted that against the setting with more agents drove the
        adjustment towards ever fewer agents (the 2-hour soak of 2026-12-02 ended at 1-4 agents)."""
        cfg = self.server.cfg
        steps = self.server.shared.agent_steps
        base = {i: steps[i] for i in self.server.agent_ids()}
        if self.stop_event.wait(min(3.0, cfg.DYNAMIC_SETTINGS_STEP_WAIT / 4)):
            return None
        deadline = time.monotonic() + cfg.DYNAMIC_SETTINGS_STEP_WAIT
        while time.monotonic() < deadline:
            waiting = [i for i in self.server.agent_ids() if steps[i] <= base.setdefault(i, steps[i])]
            if not waiting:
                break
            if self.stop_event.wait(0.1):
                return None
        c = self.server.shared.counters
        before = c[sb.C_TRAINED]
        if self.stop_event.wait(cfg.DYNAMIC_SETTINGS_STEP_WAIT):
            return None
        return (c[sb.C_TRAINED] - before) / cfg.DYNAMIC_SETTINGS_STEP_WAIT

    def propose(self, current: tuple[int, ...]) -> tuple[int, ...]:
        """A neighbour of `current`: each count moved by -1, 0 or +1 step within [1, limit], not all unchanged.

        Trainers, predictors and agent groups move by one, as the original's counts; agents by an eighth of
        their number (at least one), so that a run started with many agents can reach a good count within
        minutes, not hours."""
        sizes = (1, 1, max(1, current[2] // 8), 1)[:len(current)]
        limits = self.limits[:len(current)]
        while True:
            step = self.rng.integers(-1, 2, size=len(current))
            candidate = tuple(int(min(max(v + d * size, 1), hi))
                              for v, d, size, hi in zip(current, step, sizes, limits, strict=True))
            if candidate != current:
                return candidate

    def trial(self, score: float) -> tuple[bool, float] | None:
        """Measure the candidate now applied against the current setting's `score`: (kept, the candidate's
        score), or None when stopped meanwhile. Without a margin, one window that beats `score` keeps it (the
        original's rule); with one, a first window above score * (1 + margin) is measured again, and the change is
        kept only when the second window is above it too (its score then the mean of the two)."""
        first = self.measure()
        margin = self.server.cfg.DYNAMIC_SETTINGS_MARGIN
        if first is None or margin == 0 or first <= score * (1 + margin):
            return None if first is None else (first > score * (1 + margin), first)
        second = self.measure()
        return None if second is None else (second > score * (1 + margin), (first + second) / 2)

    def hold(self, windows: int) -> float | None:
        """The current setting's score: the mean of `windows` windows; None when stopped meanwhile."""
        total = 0.0
        for _ in range(windows):
            score = self.measure()
            if score is None:
                return None
            total += score
        return total / windows

    def run(self) -> None:
        srv = self.server
        try:
            if not srv.cfg.DYNAMIC_SETTINGS or self.stop_event.wait(srv.cfg.DYNAMIC_SETTINGS_INITIAL_WAIT):
                return
            current = self.state()
            score = self.measure()
            windows = 1  # windows the current setting is measured over after the next undone change
            while score is not None:
                candidate = self.propose(current)
                self.apply(candidate)
                outcome = self.trial(score)
                if outcome is None:
                    return
                kept, trial = outcome
                if kept:
                    current, score = candidate, trial
                    windows = 1
                else:
                    self.apply(current)
                    score = self.hold(windows)
                    windows = min(2 * windows, srv.cfg.DYNAMIC_SETTINGS_HOLD_MAX)
        except BaseException as exc:  # noqa: BLE001 - reported to the server, which stops the run cleanly
            srv.component_failed(self.name, exc)
