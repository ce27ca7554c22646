"""The gymnasium env wrapper: game-id resolution (the original's ids -> today's ALE v5 ids) and one env.

Imported by agent processes: numpy, gymnasium and ale_py only (no torch).
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
import re
from functools import lru_cache

import ale_py
import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator

from ga3c.errors import ConfigError

gym.register_envs(ale_py)
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no "[Powered by Stella]" banner per env

_ALE_ENTRY_POINT = 'ale_py.env:AtariEnv'

# The original's (gym < 0.26) Atari ids: <Game>[-ram][Deterministic|NoFrameskip]-v0|v4.
_LEGACY_ID = re.compile(
    r'^(?P<game>[A-Z][A-Za-z0-9]*?)(?P<ram>-ram)?(?P<kind>Deterministic|NoFrameskip)?-v(?P<ver>[04])$')


def _is_ale_spec(spec) -> bool:
    entry = spec.entry_point
    return isinstance(entry, str) and entry == _ALE_ENTRY_POINT


@lru_cache(maxsize=1)
def _ale_games() -> tuple[str, ...]:
    """Game names (e.g. 'Pong', 'SpaceInvaders') that have an ALE/<Game>-v5 id."""
    games = []
    for key, spec in gym.envs.registry.items():
        if key.startswith('ALE/') and key.endswith('-v5') and _is_ale_spec(spec):
            games.append(key[len('ALE/'):-len('-v5')])
    return tuple(sorted(games))


def _known_names() -> tuple[str, ...]:
    """Every id the user may type: the registry's keys plus the original's Atari ids we map."""
    return _known_names_of(len(gym.envs.registry))  # a module imported for a 'module:EnvId' adds ids


@lru_cache(maxsize=1)
def _known_names_of(registry_size: int) -> tuple[str, ...]:
    names = set(gym.envs.registry.keys())
    for game in _ale_games():
        for kind in ('', 'Deterministic', 'NoFrameskip'):
            for ver in ('0', '4'):
                names.add(f'{game}{kind}-v{ver}')
    return tuple(sorted(names))


def _old_frameskip(game: str, kind: str | None) -> str:
    """The frameskip the old gym id meant, in words. None of them had sticky actions when GA3C was written (gym
    later gave the v0 ids sticky actions 0.25; GA3C's 'Deterministic' meant none)."""
    if kind == 'Deterministic':
        return '3' if game == 'SpaceInvaders' else '4'
    if kind == 'NoFrameskip':
        return '1'
    return 'random 2-4'


def _sticky_words(p: float) -> str:
    return 'no sticky actions' if p == 0 else f'sticky actions {p:g}'


def _ale_kwargs(cfg, obs_type: str = 'grayscale') -> dict:
    return {
        'frameskip': int(cfg.FRAMESKIP),
        'repeat_action_probability': float(cfg.REPEAT_ACTION_PROBABILITY),
        'obs_type': obs_type,
        'full_action_space': False,
    }


def _suggestions(game_id: str, n: int = 3, names: tuple[str, ...] | None = None) -> list[str]:
    """Closest known ids (or closest of `names`), comparing case-insensitively and also without the 'ALE/'
    namespace."""
    query = game_id.lower()
    query_bare = query.split('/', 1)[-1]
    scored = []
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(query)
    bare_matcher = difflib.SequenceMatcher(autojunk=False)
    bare_matcher.set_seq2(query_bare)
    for name in _known_names() if names is None else names:
        low = name.lower()
        matcher.set_seq1(low)
        score = matcher.ratio()
        bare = low.split('/', 1)[-1]
        if bare != low or query_bare != query:
            bare_matcher.set_seq1(bare)
            # A bare match ranks just below an exact full-name match of the same quality.
            score = max(score, bare_matcher.ratio() - 1e-3)
        if score >= 0.6:
            scored.append((score, name))
    scored.sort(key=lambda t: (-t[0], t[1]))
    return [name for _, name in scored[:n]]


def _did_you_mean(close: list[str]) -> str:
    """'did you mean 'a'? (or 'b', 'c') ', or '' when nothing is close."""
    if not close:
        return ''
    hint = f'did you mean {close[0]!r}?'
    if len(close) > 1:
        hint += ' (or ' + ', '.join(repr(c) for c in close[1:]) + ')'
    return hint + ' '


def _entry_module(spec) -> str:
    """The module an id's entry point lives in ('popgym.envs.repeat_previous' for 'popgym....:RepeatPrevious')."""
    entry = spec.entry_point
    if isinstance(entry, str):
        return entry.split(':', 1)[0]
    return getattr(entry, '__module__', '') or ''


def _import_env_module(game_id: str, module: str) -> None:
    """Imports the module of a 'module:EnvId' game id (which registers its ids); a ConfigError when it cannot."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or module
        if missing == module or module.startswith(missing + '.'):
            top = module.split('.', 1)[0]
            close = difflib.get_close_matches(top, sorted({m.name for m in pkgutil.iter_modules()}), n=3)
            raise ConfigError(
                f'ATARI_GAME={game_id!r}: there is no module {module!r}; {_did_you_mean(close)}install the package '
                f'that provides it (pip install {top}) or check the name before the colon') from None
        raise ConfigError(f'ATARI_GAME={game_id!r}: importing module {module!r} failed, it needs {missing!r}: '
                          f'install it (pip install {missing.split(".", 1)[0]})') from None
    except Exception as exc:  # noqa: BLE001 - whatever a third-party module raises on import, said in one line
        reason = (str(exc).strip().splitlines() or [''])[0]
        raise ConfigError(f'ATARI_GAME={game_id!r}: importing module {module!r} failed ({type(exc).__name__}: '
                          f'{reason}); fix or reinstall that package') from None


def _split_module_id(game_id: str) -> tuple[str, str]:
    """(module, EnvId) of a 'module:EnvId' game id, after importing the module (gymnasium's form of gym.make)."""
    module, _, env_id = (part.strip() for part in game_id.partition(':'))
    if not module or not env_id:
        raise ConfigError(f'ATARI_GAME={game_id!r}: the module:EnvId form needs both parts, e.g. '
                          'popgym:popgym-RepeatPreviousEasy-v0')
    _import_env_module(game_id, module)
    return module, env_id


def _unknown_module_id(game_id: str, module: str, env_id: str) -> ConfigError:
    """The error for an EnvId its module did not register: the closest of the ids the module's package registers."""
    top = module.split('.', 1)[0]
    own = tuple(sorted(k for k, spec in gym.envs.registry.items() if _entry_module(spec).split('.', 1)[0] == top))
    close = _suggestions(env_id, names=own or None)
    if close:
        hint = _did_you_mean(close)
    elif own:
        hint = f'it registers {len(own)} ids such as {own[0]!r}; '
    else:
        hint = 'it registers no id; '
    return ConfigError(f'ATARI_GAME={game_id!r}: module {module!r} registers no {env_id!r}; {hint}'
                       'check the id after the colon')


def resolve_game_id(game_id: str, cfg) -> tuple[str, dict, str | None]:
    """Map a game id to (gymnasium id, kwargs for gym.make, a note to log or None), without creating the env.

    The original's Atari ids (PongDeterministic-v0, BreakoutDeterministic-v4, PongNoFrameskip-v4, Pong-v0, ...) map
    to ALE/<Game>-v5. Every ALE game gets frameskip=cfg.FRAMESKIP, repeat_action_probability=
    cfg.REPEAT_ACTION_PROBABILITY, obs_type='grayscale' ('ram' for the old '-ram' ids) and the minimal action set.
    Other gymnasium ids pass through with no kwargs. gymnasium's 'module:EnvId' form imports the module first (in
    every process that resolves the id, so spawned agents register the env too) and resolves to EnvId. An unknown id
    raises ConfigError naming the closest ids.
    """
    if not isinstance(game_id, str) or not game_id.strip():
        raise ConfigError(f'ATARI_GAME must be a gymnasium id such as ALE/Pong-v5, got {game_id!r}')
    game_id = game_id.strip()
    registry = gym.envs.registry
    given, module = game_id, None
    if ':' in game_id:
        module, game_id = _split_module_id(game_id)

    m = _LEGACY_ID.match(game_id)
    if m and m.group('game') in _ale_games():
        game, ram, kind = m.group('game'), m.group('ram'), m.group('kind')
        new_id = f'ALE/{game}-v5'
        kwargs = _ale_kwargs(cfg, 'ram' if ram else 'grayscale')
        note = (f'{game_id} is {new_id} with frameskip {kwargs["frameskip"]} and '
                f'{_sticky_words(kwargs["repeat_action_probability"])}')
        if ram:
            note += ', RAM observations'
        old_skip = _old_frameskip(game, kind)
        if old_skip != str(kwargs['frameskip']) or kwargs['repeat_action_probability'] != 0:
            note += f' (the old id meant frameskip {old_skip} and no sticky actions; FRAMESKIP and ' \
                    'REPEAT_ACTION_PROBABILITY set them)'
        return new_id, kwargs, note

    spec = registry.get(game_id)
    if spec is not None:
        if _is_ale_spec(spec):
            return game_id, _ale_kwargs(cfg), None
        return game_id, {}, None

    if module is not None:
        raise _unknown_module_id(given, module, game_id)
    raise ConfigError(
        f'unknown game {game_id!r}; {_did_you_mean(_suggestions(game_id))}ATARI_GAME takes any gymnasium id '
        '(ALE/Pong-v5, CartPole-v1, ...), module:EnvId to import the module that registers it '
        '(popgym:popgym-RepeatPreviousEasy-v0) or one of the original GA3C ids (PongDeterministic-v0, ...)')


def _render_modes(spec) -> tuple[str, ...] | None:
    """The render modes an id's env class declares (metadata['render_modes']), or None when it declares none."""
    try:
        creator = spec.entry_point if callable(spec.entry_point) else load_env_creator(spec.entry_point)
    except Exception:  # noqa: BLE001 - gym.make reports an entry point that cannot load, in its own words
        return None
    metadata = getattr(creator, 'metadata', None)
    modes = metadata.get('render_modes') if isinstance(metadata, dict) else None
    return None if modes is None else tuple(modes)


class GameManager:
    """One gymnasium env, created in the process that uses it and seeded once (its first reset)."""

    def __init__(self, game_id: str, cfg, seed: int, render_mode: str | None = None):
        self.game_id = game_id
        self.gym_id, kwargs, self.note = resolve_game_id(game_id, cfg)
        self.is_ale = _is_ale_spec(gym.envs.registry[self.gym_id])
        self.frameskip = int(kwargs.get('frameskip', 1))
        spec = gym.envs.registry[self.gym_id]
        modes = _render_modes(spec)
        self.render_problem = None  # why render() cannot give the frame asked for
        if render_mode is not None and modes is not None and render_mode not in modes:
            self.render_problem = f'it has no {render_mode!r} render mode; its render modes: {list(modes) or "none"}'
            render_mode = None
        self.render_mode = render_mode
        if render_mode is not None:  # only when asked: some constructors take no render_mode (popgym's)
            kwargs['render_mode'] = render_mode
        self.env = gym.make(self.gym_id, **kwargs)
        self._seed = None if seed is None else int(seed)
        self._seeded = False
        space = self.env.observation_space
        # Images are bytes; a Box of floats with several dimensions is a vector to flatten.
        self._is_image = isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) in (2, 3)

    def reset(self) -> np.ndarray:
        """Start an episode; the first call seeds the env (costly, ~85 ms), later ones do not."""
        if not self._seeded:
            self._seeded = True
            obs, _ = self.env.reset(seed=self._seed)
            if self._seed is not None:
                self.env.action_space.seed(self._seed)
        else:
            obs, _ = self.env.reset()
        return obs

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool]:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        return obs, float(reward), bool(terminated), bool(truncated)

    def render(self) -> np.ndarray | None:
        """The current RGB frame when made with render_mode='rgb_array' (None when made without a render mode);
        a ConfigError saying why when rgb_array was asked for but the env has no such mode."""
        if self.render_problem is not None:
            raise ConfigError(self.render_problem)
        if self.render_mode != 'rgb_array':
            return None
        return self.env.render()

    def close(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            env.close()

    @property
    def num_actions(self) -> int:
        space = self.env.action_space
        if not isinstance(space, gym.spaces.Discrete):
            raise ConfigError(f'{self.game_id}: only discrete action spaces are supported, this game has {space}')
        return int(space.n)

    @property
    def is_atari(self) -> bool:
        """True when the observation is an image."""
        return self._is_image

    @property
    def observation_space(self) -> gym.Space:
        return self.env.observation_space

    @property
    def action_space(self) -> gym.Space:
        return self.env.action_space

    @property
    def fps(self) -> float:
        """Frame rate for videos of agent steps: 60/frameskip for ALE, else the env's render_fps (30 if none)."""
        if self.is_ale:
            return 60.0 / max(1, self.frameskip)
        return float(self.env.metadata.get('render_fps') or 30)
