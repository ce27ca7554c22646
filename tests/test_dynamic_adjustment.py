"""ThreadDynamicAdjustment's hill-climbing, on a stand-in server (no processes): the moves it proposes, what it
keeps, what it goes back to and measures again, and the Ray agent groups as a fourth count."""

from types import SimpleNamespace

import numpy as np

from ga3c import SharedBuffers as sb
from ga3c import ThreadDynamicAdjustment as tda
from ga3c.settings import parse_settings
from ga3c.ThreadDynamicAdjustment import ThreadDynamicAdjustment


class Cluster:
    def __init__(self, groups: int) -> None:
        self.groups = groups

    def group_count(self) -> int:
        return self.groups

    def set_groups(self, n: int) -> None:
        self.groups = n


class Server:
    def __init__(self, cfg, cluster=None) -> None:
        self.cfg = cfg
        self.cluster = cluster
        self.shared = SimpleNamespace(counters=np.zeros(sb.N_COUNTERS), agent_steps=np.zeros(40, np.int64))
        self.current = (0, 0, 0)
        self.live: list[int] = []  # agent ids running

    def set_counts(self, trainers: int, predictors: int, agents: int) -> None:
        self.current = (trainers, predictors, agents)

    def counts(self):
        return self.current

    def agent_ids(self):
        return list(self.live)

    def component_failed(self, name, exc):
        raise exc


def cfg(*extra):
    return parse_settings(["DYNAMIC_SETTINGS=True", "DYNAMIC_SETTINGS_INITIAL_WAIT=1", "TRAINERS=2", "PREDICTORS=2",
                           "AGENTS=32", "MAX_TRAINERS=3", "MAX_PREDICTORS=2", "MAX_AGENTS=40",
                           "CLUSTER_MAX_AGENT_GROUPS=5", *extra])


def test_creates_the_initial_components_and_proposes_bounded_neighbours():
    server = Server(cfg())
    dyn = ThreadDynamicAdjustment(server)
    assert server.current == (2, 2, 32)
    for _ in range(300):
        t, p, a = dyn.propose((3, 2, 32))
        assert (t, p, a) != (3, 2, 32)
        assert 1 <= t <= 3 and 1 <= p <= 2 and a in (28, 32, 36)  # agents move by 32 // 8 = 4
    for _ in range(300):
        t, p, a, g = dyn.propose((1, 1, 1, 5))
        assert t in (1, 2) and p in (1, 2) and a in (1, 2) and g in (4, 5)


def scripted_run(dyn, monkeypatch, proposals: list, scores: list) -> list:
    """Runs the hill-climb with these proposals and window scores (None: stopped), without waiting; returns the
    counts each window measured."""
    dyn.stop_event.wait = lambda seconds: False
    proposed, scored, measured_at = iter(proposals), iter(scores), []
    monkeypatch.setattr(dyn, "propose", lambda current: next(proposed))

    def measure():
        measured_at.append(dyn.state())
        return next(scored)

    monkeypatch.setattr(dyn, "measure", measure)
    dyn.run()
    return measured_at


def test_keeps_a_better_setting_and_goes_back_from_a_worse_one_measuring_it_again(monkeypatch):
    """Without a margin, the original's rule: one window that does better keeps a change."""
    cluster = Cluster(2)
    server = Server(cfg("DYNAMIC_SETTINGS_MARGIN=0"), cluster)
    dyn = ThreadDynamicAdjustment(server)
    # baseline, better (kept), worse (undone), the kept setting measured again, then the run stops mid-window
    measured_at = scripted_run(dyn, monkeypatch, [(3, 2, 32, 3), (3, 1, 36, 4), (2, 2, 32, 3)],
                               [100.0, 150.0, 120.0, 140.0, None])
    assert measured_at == [(2, 2, 32, 2), (3, 2, 32, 3), (3, 1, 36, 4), (3, 2, 32, 3), (2, 2, 32, 3)]
    assert server.current == (2, 2, 32) and cluster.groups == 3  # the last proposal, applied when the run stopped


def test_with_a_margin_a_change_is_kept_only_when_two_windows_beat_the_current_setting_by_it(monkeypatch):
    """MARGIN=0.1 against a current score of 100: 105 is noise (undone after one window), 130 then 108 is a lucky
    window (undone after the second), 130 then 120 is kept with the mean 125 as its score, against which 135 is no
    gain (undone after one window, as 135 < 125 * 1.1)."""
    server = Server(cfg("DYNAMIC_SETTINGS_MARGIN=0.1"))
    dyn = ThreadDynamicAdjustment(server)
    a, b, c, d, e = (3, 2, 32), (2, 1, 32), (2, 2, 36), (1, 2, 36), (2, 2, 40)
    measured_at = scripted_run(dyn, monkeypatch, [a, b, c, d, e],
                               [100.0, 105.0, 100.0, 130.0, 108.0, 100.0, 130.0, 120.0, 135.0, 124.0, None])
    start = (2, 2, 32)
    # after d is undone, the kept c is measured again and is where the next change (e) starts from
    assert measured_at == [start, a, start, b, b, start, c, c, d, c, e]


def test_with_a_hold_each_undone_change_doubles_the_windows_before_the_next_trial(monkeypatch):
    """HOLD_MAX=4, no margin: undone changes hold the current setting for 1, 2, then 4 windows (at most), their
    mean the score the next trial must beat; a kept change starts again from one window."""
    server = Server(cfg("DYNAMIC_SETTINGS_MARGIN=0", "DYNAMIC_SETTINGS_HOLD_MAX=4"))
    dyn = ThreadDynamicAdjustment(server)
    start, a, b, c, d, e, f = (2, 2, 32), (3, 2, 32), (2, 1, 32), (3, 2, 36), (1, 2, 36), (2, 2, 28), (2, 1, 28)
    scores = [100.0,
              90.0, 100.0,  # a undone, start held 1 window: 100
              99.0, 110.0, 120.0,  # b (99 < 100) undone, start held 2 windows: mean 115
              114.0, 100.0, 110.0, 120.0, 130.0,  # c (114 < 115) undone, held 4 windows: mean 115
              116.0,  # d (116 > 115) kept, its score 116
              90.0, 116.0,  # e undone: d held 1 window again
              None]  # f: stopped
    measured_at = scripted_run(dyn, monkeypatch, [a, b, c, d, e, f], scores)
    assert measured_at == [start, a, start, b, start, start, c, *[start] * 4, d, e, d, f]
    assert server.current == f  # stopped while f was measured


def test_hold_max_of_one_is_the_original_schedule(monkeypatch):
    """The default: after every undone change, one window of the current setting, then the next trial."""
    server = Server(cfg("DYNAMIC_SETTINGS_MARGIN=0"))
    dyn = ThreadDynamicAdjustment(server)
    start, a, b, c = (2, 2, 32), (3, 2, 32), (2, 1, 32), (3, 2, 36)
    measured_at = scripted_run(dyn, monkeypatch, [a, b, c], [100.0, 90.0, 100.0, 80.0, 100.0, None])
    assert measured_at == [start, a, start, b, start, c]


def test_measure_counts_trained_samples_per_second_of_the_window_only():
    """The objective: transitions trained during the window, divided by its length; what was trained while the
    new setting settled does not count."""
    server = Server(cfg("DYNAMIC_SETTINGS_STEP_WAIT=8"))
    dyn = ThreadDynamicAdjustment(server)
    c = server.shared.counters
    c[sb.C_TRAINED] = 1000
    c[sb.C_UPDATES] = 10
    waits = []

    def wait(seconds):  # time passes: 500 transitions while settling, 1200 (in 3 updates) during the window
        waits.append(seconds)
        c[sb.C_TRAINED] += 500 if len(waits) == 1 else 1200
        c[sb.C_UPDATES] += 3
        return False

    dyn.stop_event.wait = wait
    assert dyn.measure() == 1200 / 8
    assert waits == [2.0, 8]  # settles for a quarter of the window (at most 3 s), then measures the window
    dyn.stop_event.wait = lambda seconds: True  # stopped meanwhile
    assert dyn.measure() is None


def test_the_window_starts_once_every_agent_running_has_stepped():
    """A new agent spends seconds starting: the window waits for it, and for the replacement of an agent that died
    meanwhile, so that its start-up is not counted against the setting."""
    server = Server(cfg("DYNAMIC_SETTINGS_STEP_WAIT=8"))
    dyn = ThreadDynamicAdjustment(server)
    server.live = [0, 1]  # agent 1 was just started by the change
    c, steps = server.shared.counters, server.shared.agent_steps
    waits = []

    def wait(seconds):
        waits.append(seconds)
        n = len(waits)
        if n == 1:  # settling: agent 0 steps, agent 1 is still importing
            steps[0] += 8
            c[sb.C_TRAINED] += 500
        elif n == 2:  # agent 1 dies and agent 2 replaces it
            server.live = [0, 2]
            c[sb.C_TRAINED] += 100
        elif n == 3:  # agent 2 steps
            steps[2] += 8
            c[sb.C_TRAINED] += 100
        else:  # the window
            c[sb.C_TRAINED] += 1200
        return False

    dyn.stop_event.wait = wait
    assert dyn.measure() == 1200 / 8
    assert waits == [2.0, 0.1, 0.1, 8]


def test_an_agent_that_never_steps_delays_the_window_by_one_window_at_most(monkeypatch):
    server = Server(cfg("DYNAMIC_SETTINGS_STEP_WAIT=8"))
    dyn = ThreadDynamicAdjustment(server)
    server.live = [3]
    clock = [100.0]
    monkeypatch.setattr(tda.time, "monotonic", lambda: clock[0])
    waits = []

    def wait(seconds):
        waits.append(seconds)
        clock[0] += seconds
        return False

    dyn.stop_event.wait = wait
    assert dyn.measure() == 0.0
    assert waits[0] == 2.0 and waits[-1] == 8 and 79 <= len(waits) - 2 <= 81  # polls for 8 s, then the window
