"""Benchmark of the request -> reply transport between agent processes and a batching predictor.

N agent processes (spawn) each loop: write a fresh 4x84x84 uint8 state (or, for the original, build it as a
float32 array), send a prediction request, wait for the reply (a policy of 6 floats and a value) and read it.
One "predictor" thread in the main process takes whatever requests are queued (up to 128), gathers their states
into a batch array, writes a uniform policy and a value for each and answers each agent. There is no model: the
figures are the transport's cost alone (plus the batch gather that any predictor does).

Cases:
  queue_f32     the original GA3C: the state pickled as float32 through one mp.Queue, the reply (numpy policy +
                value) through a per-agent mp.Queue;
  shm_queue     state in shared memory (RawArray), agent id through one mp.Queue, reply written to shared arrays
                and signalled through a per-agent mp.Queue;
  shm_simpleq   as shm_queue with mp.SimpleQueue for the ids and the signals (no feeder threads);
  shm_pipe      ga3c's (ga3c/SharedBuffers.py): state in shared memory, the 4-byte id written with os.write into
                one pipe shared by all agents, read in one os.read by the predictor (non-blocking fd + select),
                reply in shared arrays and one byte written into the agent's own pipe.

Reported per case and agent count: round trips/s over all agents, the mean round trip an agent sees (us), and
the mean batch the predictor drained. The last line printed is a JSON object with the same figures.

    python scripts/bench_transport.py [--seconds 3] [--agents 1,8] [--cases queue_f32,shm_pipe]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import select
import struct
import sys
import threading
import time

import numpy as np

STATE_SHAPE = (4, 84, 84)
NUM_ACTIONS = 6
MAX_BATCH = 128
N_FRAMES = 4  # distinct precomputed states an agent cycles through
REQUEST = struct.Struct("<i")

# phase values shared with the agents
WARMUP, MEASURE, STOP = 0, 1, 2

CASES = ("queue_f32", "shm_queue", "shm_simpleq", "shm_pipe")


def _np_view(raw, dtype, shape):
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


# ----------------------------------------------------------------------------------------------- agent side
def agent_main(case, aid, n_agents, raws, chans):
    """One agent process: round trips until the phase says STOP, then stores its count and summed latency."""
    phase = _np_view(raws["phase"], np.int32, (1,))
    stats = _np_view(raws["stats"], np.float64, (n_agents, 2))
    ready = _np_view(raws["ready"], np.int32, (n_agents,))
    rng = np.random.default_rng(aid)
    frames = rng.integers(0, 256, size=(N_FRAMES,) + STATE_SHAPE, dtype=np.uint8)
    if case != "queue_f32":
        obs = _np_view(raws["obs"], np.uint8, (n_agents,) + STATE_SHAPE)[aid]
        policy = _np_view(raws["policy"], np.float32, (n_agents, NUM_ACTIONS))[aid]
        value = _np_view(raws["value"], np.float32, (n_agents,))

    if case == "queue_f32":
        req_q, rep_q = chans["req"], chans["rep"]

        def round_trip(i):
            state = frames[i % N_FRAMES].astype(np.float32)
            req_q.put((aid, state))
            pol, val = rep_q.get()
            return pol, val
    elif case in ("shm_queue", "shm_simpleq"):
        req_q, rep_q = chans["req"], chans["rep"]

        def round_trip(i):
            np.copyto(obs, frames[i % N_FRAMES])
            req_q.put(aid)
            rep_q.get()
            return policy.copy(), float(value[aid])
    else:  # shm_pipe
        req_fd, rep_fd = chans["req"].fileno(), chans["rep"].fileno()
        msg = REQUEST.pack(aid)

        def round_trip(i):
            np.copyto(obs, frames[i % N_FRAMES])
            os.write(req_fd, msg)
            if not os.read(rep_fd, 1):
                raise EOFError("reply pipe closed")
            return policy.copy(), float(value[aid])

    ready[aid] = 1
    count, total = 0, 0.0
    i = 0
    clock = time.perf_counter
    while True:
        p = int(phase[0])
        if p == STOP:
            break
        t = clock()
        round_trip(i)
        if p == MEASURE:
            total += clock() - t
            count += 1
        i += 1
    stats[aid, 0] = count
    stats[aid, 1] = total
    if case in ("queue_f32", "shm_queue"):
        req_q.close()
        req_q.join_thread()


# ---------------------------------------------------------------------------------------------- server side
class Server(threading.Thread):
    """The predictor: drains up to MAX_BATCH queued requests, gathers their states, answers each."""

    def __init__(self, case, n_agents, raws, chans, phase):
        super().__init__(daemon=True)
        self.case, self.n, self.chans, self.phase = case, n_agents, chans, phase
        self.stop = threading.Event()
        self.batches = 0
        self.items = 0
        self.error = None
        if case == "queue_f32":
            self.batch = np.empty((MAX_BATCH,) + STATE_SHAPE, np.float32)
        else:
            self.batch = np.empty((MAX_BATCH,) + STATE_SHAPE, np.uint8)
            self.obs = _np_view(raws["obs"], np.uint8, (n_agents,) + STATE_SHAPE)
            self.policy = _np_view(raws["policy"], np.float32, (n_agents, NUM_ACTIONS))
            self.value = _np_view(raws["value"], np.float32, (n_agents,))
        self.uniform = np.full((MAX_BATCH, NUM_ACTIONS), 1.0 / NUM_ACTIONS, np.float32)

    def _count(self, n):
        if self.phase[0] == MEASURE:
            self.batches += 1
            self.items += n

    def run(self):
        try:
            getattr(self, "_run_" + self.case)()
        except Exception as exc:  # reported by the main thread
            self.error = exc

    def _run_queue_f32(self):
        req_q, rep_qs, batch = self.chans["req"], self.chans["rep"], self.batch
        ids = []
        while not self.stop.is_set():
            try:
                aid, state = req_q.get(timeout=0.05)
            except queue.Empty:
                continue
            ids.clear()
            ids.append(aid)
            batch[0] = state
            while len(ids) < MAX_BATCH:
                try:
                    aid, state = req_q.get_nowait()
                except queue.Empty:
                    break
                batch[len(ids)] = state
                ids.append(aid)
            n = len(ids)
            value = batch[:n, 0, 0, 0] * (1.0 / 255.0)
            policy = self.uniform[:n].copy()
            for k, aid in enumerate(ids):
                rep_qs[aid].put((policy[k], float(value[k])))
            self._count(n)

    def _answer_shm(self, ids):
        n = len(ids)
        np.take(self.obs, ids, axis=0, out=self.batch[:n])
        self.policy[ids] = self.uniform[:n]
        self.value[ids] = self.batch[:n, 0, 0, 0] * (1.0 / 255.0)
        self._count(n)

    def _run_shm_queue(self):
        req_q, rep_qs = self.chans["req"], self.chans["rep"]
        while not self.stop.is_set():
            try:
                ids = [req_q.get(timeout=0.05)]
            except queue.Empty:
                continue
            while len(ids) < MAX_BATCH:
                try:
                    ids.append(req_q.get_nowait())
                except queue.Empty:
                    break
            self._answer_shm(np.asarray(ids, np.intp))
            for aid in ids:
                rep_qs[aid].put(True)

    def _run_shm_simpleq(self):
        req_q, rep_qs = self.chans["req"], self.chans["rep"]
        while True:
            ids = [req_q.get()]  # the main thread sends -1 to stop
            while len(ids) < MAX_BATCH and not req_q.empty():
                ids.append(req_q.get())
            if -1 in ids:
                ids = [a for a in ids if a >= 0]
                self.stop.set()
            if ids:
                self._answer_shm(np.asarray(ids, np.intp))
                for aid in ids:
                    rep_qs[aid].put(True)
            if self.stop.is_set():
                return

    def _run_shm_pipe(self):
        fd = self.chans["req_r"].fileno()
        rep_fds = [c.fileno() for c in self.chans["rep_w"]]
        os.set_blocking(fd, False)
        while not self.stop.is_set():
            readable, _, _ = select.select([fd], [], [], 0.05)
            if not readable:
                continue
            try:
                data = os.read(fd, REQUEST.size * MAX_BATCH)
            except BlockingIOError:
                continue
            if not data:
                return
            ids = np.frombuffer(data, dtype="<i4").astype(np.intp)  # 4-byte writes are atomic: whole records
            self._answer_shm(ids)
            for aid in ids:
                os.write(rep_fds[aid], b"\x01")


# ---------------------------------------------------------------------------------------------------- driver
def _make_channels(ctx, case, n):
    """Returns (server's channels, per-agent channels, objects to close afterwards)."""
    if case in ("queue_f32", "shm_queue"):
        req = ctx.Queue()
        reps = [ctx.Queue() for _ in range(n)]
        return {"req": req, "rep": reps}, [{"req": req, "rep": r} for r in reps], [req] + reps
    if case == "shm_simpleq":
        req = ctx.SimpleQueue()
        reps = [ctx.SimpleQueue() for _ in range(n)]
        return {"req": req, "rep": reps}, [{"req": req, "rep": r} for r in reps], [req] + reps
    req_r, req_w = ctx.Pipe(duplex=False)
    pairs = [ctx.Pipe(duplex=False) for _ in range(n)]
    server = {"req_r": req_r, "rep_w": [w for _, w in pairs]}
    agents = [{"req": req_w, "rep": r} for r, _ in pairs]
    return server, agents, [req_r, req_w] + [c for pair in pairs for c in pair]


def _close(objs):
    for o in objs:
        try:
            o.close()
            if hasattr(o, "join_thread"):
                o.join_thread()
        except Exception:
            pass


def run_case(ctx, case, n, seconds, warmup=0.3):
    raws = {
        "phase": ctx.RawArray("i", 1),
        "stats": ctx.RawArray("d", 2 * n),
        "ready": ctx.RawArray("i", n),
    }
    if case != "queue_f32":
        raws["obs"] = ctx.RawArray("B", n * int(np.prod(STATE_SHAPE)))
        raws["policy"] = ctx.RawArray("f", n * NUM_ACTIONS)
        raws["value"] = ctx.RawArray("f", n)
    phase = _np_view(raws["phase"], np.int32, (1,))
    ready = _np_view(raws["ready"], np.int32, (n,))
    stats = _np_view(raws["stats"], np.float64, (n, 2))
    server_ch, agent_ch, to_close = _make_channels(ctx, case, n)
    server = Server(case, n, raws, server_ch, phase)
    server.start()
    procs = [ctx.Process(target=agent_main, args=(case, a, n, raws, agent_ch[a]), daemon=True) for a in range(n)]
    leftovers = 0
    wall0 = time.perf_counter()
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + 60
        while not ready.all():
            if time.monotonic() > deadline or any(p.exitcode not in (None, 0) for p in procs):
                raise RuntimeError(f"{case}: agents did not start")
            time.sleep(0.01)
        start_s = time.perf_counter() - wall0
        time.sleep(warmup)
        phase[0] = MEASURE
        t0 = time.perf_counter()
        time.sleep(seconds)
        phase[0] = STOP
        elapsed = time.perf_counter() - t0
        for p in procs:
            p.join(timeout=5)
    finally:
        phase[0] = STOP
        for p in procs:
            if p.is_alive():
                leftovers += 1
                p.terminate()
                p.join(timeout=2)
            if p.is_alive():
                p.kill()
                p.join(timeout=2)
        server.stop.set()
        if case == "shm_simpleq":
            server_ch["req"].put(-1)
        server.join(timeout=5)
        _close(to_close)
    if server.error is not None:
        raise RuntimeError(f"{case}: predictor failed: {server.error!r}")
    count, total = stats[:, 0].sum(), stats[:, 1].sum()
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    return {
        "case": case,
        "agents": n,
        "round_trips_per_s": round(count / elapsed, 1),
        "mean_rtt_us": round(1e6 * total / count, 1) if count else None,
        "mean_batch": round(server.items / server.batches, 2) if server.batches else None,
        "round_trips": int(count),
        "seconds": round(elapsed, 3),
        "agent_failures": len(bad) + leftovers,
        "start_s": round(start_s, 2),
        "wall_s": round(time.perf_counter() - wall0, 2),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per case (default 3)")
    parser.add_argument("--agents", default="1,8", help="comma-separated agent counts (default 1,8)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of {','.join(CASES)}")
    args = parser.parse_args(argv)
    agents = [int(a) for a in args.agents.split(",") if a.strip()]
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown or not agents or min(agents) < 1 or args.seconds <= 0:
        parser.error(f"bad arguments (unknown cases: {unknown})")
    ctx = mp.get_context("spawn")
    results = []
    print(f"{'case':<12} {'agents':>6} {'round trips/s':>14} {'mean rtt us':>12} {'mean batch':>11}", flush=True)
    for n in agents:
        for case in cases:
            r = run_case(ctx, case, n, args.seconds)
            results.append(r)
            note = f"  ({r['agent_failures']} agents failed)" if r["agent_failures"] else ""
            print(
                f"{case:<12} {n:>6} {r['round_trips_per_s']:>14.0f} {r['mean_rtt_us'] or float('nan'):>12.1f} "
                f"{r['mean_batch'] or float('nan'):>11.2f}{note}",
                flush=True,
            )
    print(
        json.dumps(
            {
                "bench": "transport",
                "state": "4x84x84 uint8",
                "seconds_per_case": args.seconds,
                "cpus": os.cpu_count(),
                "python": sys.version.split()[0],
                "numpy": np.__version__,
                "results": results,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
