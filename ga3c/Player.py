"""Play mode: `./_play.sh [KEY=VALUE ...]` (= `python -m ga3c PLAY_MODE=True ...`) watches a trained checkpoint.

One agent in this one process (no agent processes, no predictor or trainer threads): it loads the latest checkpoint
of CHECKPOINT_DIR (or LOAD_EPISODE's), checks that it was made for this game and network, plays PLAY_EPISODES
episodes and prints each episode's score and length, then their mean +- std. Nothing trains, nothing is saved, and
the training results file (RESULTS_FILENAME) is never written.

- Actions: the argmax of the policy (greedy, as the original's play mode), or a sample of it with
  PLAY_STOCHASTIC=True.
- No-ops: each episode starts with a random number, 0..PLAY_NOOP_MAX, of no-op actions (action 0), the standard
  Atari evaluation protocol; only for games whose action 0 is NOOP (every ALE game), not for vector games such as
  CartPole whose action 0 moves something.
- Seeds: the environment is seeded from SEED (its first reset), and so are the no-op counts and the sampled actions:
  the same settings and checkpoint play the same episodes.
- Screen: with a display (DISPLAY or WAYLAND_DISPLAY set) and VIDEO_PATH empty, the game is shown in a pygame
  window, scaled up, at the game's frame rate (q or Esc quits). Without a display, or when VIDEO_PATH is set, every
  played episode is recorded into one MP4 file (VIDEO_PATH, default `play.mp4`; 'mp4v' codec, the game's frame
  rate, its RGB screen). The video rule: ONE FRAME AFTER EACH RESET AND ONE AFTER EACH AGENT STEP (no-ops
  included), so a video of E complete episodes of lengths L1..LE has exactly L1 + ... + LE + E frames.
  Vector games (CartPole, ...) record their `rgb_array` render, which gymnasium draws with pygame.
"""

from __future__ import annotations

import copy
import logging
import os
import time

import cv2
import numpy as np
import torch

from ga3c.Checkpoint import check_compatible, find_checkpoint, load_checkpoint, make_meta
from ga3c.Environment import Environment
from ga3c.errors import CheckpointError, ConfigError
from ga3c.GameManager import resolve_game_id
from ga3c.NetworkVP import NetworkVP, network_kind, resolve_device
from ga3c.settings import config_from_dict

log = logging.getLogger("ga3c")

DEFAULT_VIDEO = "play.mp4"
WINDOW_NAME = "ga3c"
WINDOW_TARGET_SIZE = 640  # the window scales the screen up by a whole factor to about this many pixels
# Settings that shape the network or its input: play takes the checkpoint's, since no other value can load it
# (and the optimizer's, so that its state loads without a warning about a change that play does not use).
ADOPTED_SETTINGS = ("STACKED_FRAMES", "IMAGE_HEIGHT", "IMAGE_WIDTH", "RESIZE_INTERPOLATION", "FRAME_RESCALE",
                    "MLP_HIDDEN_SIZE", "MIN_POLICY", "USE_LOG_SOFTMAX", "NETWORK_TYPE", "LSTM_SIZE", "OPTIMIZER",
                    "DUAL_RMSPROP")
# Settings of the game itself: the user's win (an evaluation may change them on purpose), with a warning.
WARNED_SETTINGS = ("FRAMESKIP", "REPEAT_ACTION_PROBABILITY")


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


class _Quit(Exception):
    """The user closed the window or pressed q/Esc."""


class _NoScreen:
    """Plays without showing or recording anything (a game whose screen cannot be rendered here)."""

    def show(self, frame: np.ndarray) -> None:
        pass

    def close(self) -> None:
        pass


class _Video:
    """Writes RGB frames into one MP4 file; opened at the first frame (which gives the size)."""

    def __init__(self, path: str, fps: float):
        self.path = path
        self.fps = float(fps)
        self.writer: cv2.VideoWriter | None = None
        self.size: tuple[int, int] | None = None
        self.frames = 0

    def show(self, frame: np.ndarray) -> None:
        h, w = frame.shape[:2]
        h, w = h - h % 2, w - w % 2  # the codec wants even sizes
        if self.writer is None:
            folder = os.path.dirname(os.path.abspath(self.path))
            try:
                os.makedirs(folder, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"VIDEO_PATH '{self.path}': cannot create its folder ({exc.strerror}); "
                                  f"choose another path with VIDEO_PATH=FILE.mp4") from None
            writer = cv2.VideoWriter(self.path, cv2.VideoWriter_fourcc(*"mp4v"), self.fps, (w, h))
            if not writer.isOpened():
                raise ConfigError(f"VIDEO_PATH '{self.path}': OpenCV cannot write an MP4 file there; choose another "
                                  f"path with VIDEO_PATH=FILE.mp4")
            self.writer, self.size = writer, (w, h)
        if (w, h) != self.size:  # pragma: no cover - a game's screen keeps its size
            frame = cv2.resize(frame, self.size, interpolation=cv2.INTER_NEAREST)
        self.writer.write(cv2.cvtColor(np.ascontiguousarray(frame[:h, :w]), cv2.COLOR_RGB2BGR))
        self.frames += 1

    def close(self) -> None:
        if self.writer is not None:
            self.writer.release()
            self.writer = None


class _Window:
    """Shows RGB frames in a pygame window (pygame comes with gymnasium[classic-control]; OpenCV is the headless
    build, which keeps the agent processes small), scaled up, paced at the game's frame rate; q, Esc or closing
    the window quits."""

    def __init__(self, fps: float):
        import pygame  # ImportError without pygame

        pygame.display.init()  # pygame.error without a usable display
        self.pygame = pygame
        self.period = 1.0 / max(float(fps), 1e-3)
        self.next_time = time.monotonic()
        self.screen = None

    def show(self, frame: np.ndarray) -> None:
        pg = self.pygame
        h, w = frame.shape[:2]
        if self.screen is None:
            scale = max(1, WINDOW_TARGET_SIZE // max(h, w))
            self.screen = pg.display.set_mode((w * scale, h * scale))
            pg.display.set_caption(WINDOW_NAME)
        surface = pg.surfarray.make_surface(np.ascontiguousarray(frame[:, :, :3]).swapaxes(0, 1))
        if surface.get_size() != self.screen.get_size():
            surface = pg.transform.scale(surface, self.screen.get_size())
        self.screen.blit(surface, (0, 0))
        pg.display.flip()
        time.sleep(max(0.0, self.next_time - time.monotonic()))
        self.next_time = max(self.next_time + self.period, time.monotonic())
        for event in pg.event.get():
            if event.type == pg.QUIT or (event.type == pg.KEYDOWN and event.key in (pg.K_q, pg.K_ESCAPE)):
                raise _Quit

    def close(self) -> None:
        self.pygame.display.quit()


class Player:
    """Plays PLAY_EPISODES episodes of a checkpoint with one agent; see the module docstring."""

    def __init__(self, cfg) -> None:
        self.cfg = copy.copy(cfg)  # settings adopted from the checkpoint must not leak into the caller's
        self.scores: list[float] = []
        self.lengths: list[int] = []
        self.video_path: str | None = None
        self.video_frames = 0
        self.video_fps = 0.0

    # ------------------------------------------------------------------ checkpoint
    def _train_hint(self) -> str:
        cfg = self.cfg
        return f"train first: ./_train.sh ATARI_GAME={cfg.ATARI_GAME} CHECKPOINT_DIR={cfg.CHECKPOINT_DIR}"

    def _find_and_load(self) -> dict:
        cfg = self.cfg
        try:
            path = find_checkpoint(cfg.CHECKPOINT_DIR, cfg.NETWORK_NAME, cfg.LOAD_EPISODE)
        except CheckpointError as exc:
            text = str(exc)
            if text.startswith(("no checkpoint in", "no usable checkpoint")):
                text = text.split(": train", 1)[0]
                raise CheckpointError(f"play mode needs a checkpoint: {text}; {self._train_hint()} "
                                      f"(or point CHECKPOINT_DIR at one)") from None
            raise
        return load_checkpoint(path)

    def _adopt_settings(self, checkpoint: dict) -> None:
        """Takes the network-shaping settings from the checkpoint; warns about game settings that differ."""
        cfg = self.cfg
        saved = checkpoint.get("settings")
        if not isinstance(saved, dict):
            return
        try:
            stored = config_from_dict({k: v for k, v in saved.items() if k in ADOPTED_SETTINGS + WARNED_SETTINGS})
        except ConfigError as exc:
            log.warning("the checkpoint's settings cannot be read (%s): using this run's", exc)
            return
        for key in ADOPTED_SETTINGS:
            if key in saved and getattr(stored, key) != getattr(cfg, key):
                log.info("using the checkpoint's %s=%r (this run had %r)", key, getattr(stored, key),
                         getattr(cfg, key))
                setattr(cfg, key, getattr(stored, key))
        for key in WARNED_SETTINGS:
            if key in saved and getattr(stored, key) != getattr(cfg, key):
                log.warning("the checkpoint was trained with %s=%r; playing with %s=%r", key, getattr(stored, key),
                            key, getattr(cfg, key))

    def _check(self, checkpoint: dict, meta: dict) -> None:
        try:
            check_compatible(checkpoint, meta)
        except CheckpointError as exc:
            stored = (checkpoint.get("meta") or {}).get("game")
            hint = self._train_hint()
            if stored and stored != meta["game"]:
                # the id as the run was given it: a 'module:EnvId' id resolves only with its module named
                given = (checkpoint.get("settings") or {}).get("ATARI_GAME")
                game = given if isinstance(given, str) and given.strip() else stored
                hint = (f"watch it with ./_play.sh ATARI_GAME={game} CHECKPOINT_DIR={self.cfg.CHECKPOINT_DIR}, or "
                        f"{hint}")
            raise CheckpointError(f"{exc}; {hint}") from None

    # ------------------------------------------------------------------ screen
    def _open_screen(self, env: Environment):
        cfg = self.cfg
        if not cfg.VIDEO_PATH and has_display():
            try:
                window = _Window(env.fps)
                log.info("showing the game in a window (q or Esc quits)")
                return window
            except Exception as exc:  # noqa: BLE001 - pygame missing or no usable display: record instead
                log.warning("cannot open a window (%s): recording to %s instead",
                            (str(exc).strip().splitlines() or [type(exc).__name__])[-1], DEFAULT_VIDEO)
        self.video_path = cfg.VIDEO_PATH or DEFAULT_VIDEO
        return _Video(self.video_path, env.fps)

    def _grab(self, env: Environment, screen):
        """The current RGB frame, or None once the screen is _NoScreen; decides what to do when it can't render."""
        if isinstance(screen, _NoScreen):
            return screen, None
        try:
            frame = env.frame()
        except Exception as exc:  # gymnasium's DependencyNotInstalled (pygame) and the like
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if self.cfg.VIDEO_PATH:
                # A ConfigError: the game has no screen at all (no rgb_array render mode), nothing to install.
                fix = "leave VIDEO_PATH empty" if isinstance(exc, ConfigError) else \
                    "install what it names, or leave VIDEO_PATH empty"
                raise ConfigError(f"{self.cfg.ATARI_GAME}'s screen cannot be rendered here ({reason}), so "
                                  f"VIDEO_PATH cannot be recorded: {fix}") from None
            log.warning("%s's screen cannot be rendered here (%s): playing without a video or window",
                        self.cfg.ATARI_GAME, reason)
            screen.close()
            self.video_path = None
            return _NoScreen(), None
        if frame is None:  # pragma: no cover - Environment is made with render_mode='rgb_array'
            raise ConfigError(f"{self.cfg.ATARI_GAME} returns no rgb_array frame")
        return screen, frame

    # ------------------------------------------------------------------ play
    def run(self) -> int:
        """Plays and prints the scores; returns the exit status (0; 130 when interrupted by Ctrl-C)."""
        cfg = self.cfg
        game_id, _, note = resolve_game_id(cfg.ATARI_GAME, cfg)
        if note:
            log.info(note)
        checkpoint = self._find_and_load()
        self._adopt_settings(checkpoint)
        env = Environment(cfg, seed=int(cfg.SEED), render_mode="rgb_array")
        threads = torch.get_num_threads()
        try:
            meta = make_meta(game_id, env.state_shape, env.num_actions, network_kind(cfg, env.state_shape))
            self._check(checkpoint, meta)
            device = resolve_device(cfg.DEVICE)
            # One state at a time: one thread is as fast as several, and far faster on a busy machine (no
            # OpenMP threads spinning against each other); TORCH_THREADS still wins when set.
            torch.set_num_threads(cfg.TORCH_THREADS if cfg.TORCH_THREADS > 0 else 1)
            network = NetworkVP(cfg, env.state_shape, env.num_actions, device)
            network.set_state(checkpoint["network"])
            counters = checkpoint.get("counters") or {}
            log.info("playing %s with %s (trained %s episodes, %s steps) on %s: %s actions, seed %d", game_id,
                     checkpoint["path"], counters.get("episodes", "?"), counters.get("steps", "?"), device,
                     "sampled" if cfg.PLAY_STOCHASTIC else "greedy", cfg.SEED)
            status = self._play(env, network)
        finally:
            env.close()
            torch.set_num_threads(threads)
        self._report()
        return status

    def _has_noop(self, env: Environment) -> bool:
        try:
            return env.game.env.unwrapped.get_action_meanings()[0] == "NOOP"
        except (AttributeError, IndexError):
            return False

    def _play(self, env: Environment, network: NetworkVP) -> int:
        cfg = self.cfg
        noop_rng, action_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(cfg.SEED).spawn(2))
        noop_max = int(cfg.PLAY_NOOP_MAX)
        if noop_max and not self._has_noop(env):
            log.info("PLAY_NOOP_MAX=%d does not apply: %s's action 0 is not a no-op", noop_max, cfg.ATARI_GAME)
            noop_max = 0
        elif noop_max:
            log.info("each episode starts with 0 to %d no-ops", noop_max)
        screen = self._open_screen(env)
        status = 0
        try:
            for episode in range(1, cfg.PLAY_EPISODES + 1):
                noops = int(noop_rng.integers(0, noop_max + 1)) if noop_max else 0
                state = env.reset()
                memory = None  # the LSTM's state: zero at an episode's start, carried through it
                screen, frame = self._grab(env, screen)
                if frame is not None:
                    screen.show(frame)
                score, steps, done = 0.0, 0, False
                while not done:
                    if network.recurrent_size:  # every step, no-ops included: the state follows the game
                        policy, _, memory = network.predict(torch.from_numpy(np.array(state)), memory)
                    elif steps >= noops:
                        policy, _ = network.predict(torch.from_numpy(np.array(state)))
                    if steps < noops:
                        action = 0
                    else:
                        p = policy[0].double().numpy()
                        if cfg.PLAY_STOCHASTIC:
                            action = int(action_rng.choice(p.shape[0], p=p / p.sum()))
                        else:
                            action = int(np.argmax(p))
                    state, reward, terminated, truncated = env.step(action)
                    score += reward
                    steps += 1
                    done = terminated or truncated
                    screen, frame = self._grab(env, screen)
                    if frame is not None:
                        screen.show(frame)
                self.scores.append(score)
                self.lengths.append(steps)
                extra = f" ({noops} no-ops)" if noop_max else ""
                print(f"episode {episode}/{cfg.PLAY_EPISODES}: score {score:g}, length {steps} steps{extra}",
                      flush=True)
        except _Quit:
            print(f"stopped from the window after {len(self.scores)} complete episode(s)", flush=True)
        except KeyboardInterrupt:
            print(f"interrupted after {len(self.scores)} complete episode(s)", flush=True)
            status = 130
        finally:
            screen.close()
            if isinstance(screen, _Video):
                self.video_frames, self.video_fps = screen.frames, screen.fps
        return status

    def _report(self) -> None:
        n = len(self.scores)
        if n:
            scores = np.asarray(self.scores, dtype=np.float64)
            lengths = np.asarray(self.lengths, dtype=np.float64)
            print(f"score {scores.mean():.2f} +- {scores.std():.2f} (mean +- std over {n} episode{'s' * (n > 1)}, "
                  f"min {scores.min():g}, max {scores.max():g}); length {lengths.mean():.1f} +- "
                  f"{lengths.std():.1f} steps", flush=True)
        else:
            print("no episode completed", flush=True)
        if self.video_path is not None and self.video_frames:
            seconds = self.video_frames / max(self.video_fps, 1e-9)
            print(f"video: {os.path.abspath(self.video_path)} ({self.video_frames} frames, "
                  f"{int(seconds // 60)}:{seconds % 60:04.1f})", flush=True)
