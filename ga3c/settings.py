"""Reads the settings: `Config.py` defaults, then `--config FILE.toml` files, then `KEY=VALUE` arguments.

When the model runs on the CPU and no `--config` was given, the training command (`python -m ga3c`, `_train.sh`)
puts a CPU preset under the `KEY=VALUE` arguments (`auto_preset`): `Config.py` keeps the original's values, which
are sized for a GPU.

Every value is parsed by the type of its default and checked once, before any process starts, so a typo dies
with one line that names the key, the value, what was expected and the fix, instead of an hour into a run (the
original GA3C took `KEY=False` as True and died on unknown keys with a bare AttributeError).
No torch import here: agent processes import this module.
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import logging
import math
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

from ga3c.Config import Config
from ga3c.errors import ConfigError

__all__ = ['parse_settings', 'validate', 'config_to_dict', 'config_from_dict', 'changed_settings',
           'settings_table', 'setting_names', 'help_text', 'auto_preset', 'model_on_cpu']

log = logging.getLogger(__name__)

CLI = 'the command line'
HELP_HINT = 'Run with --help to list every setting.'
# The network's two conv layers (8x8 stride 4, then 4x4 stride 2) need frames at least this large.
MIN_IMAGE_SIZE = 36
TRUE_WORDS = frozenset({'true', '1', 'yes', 'on'})
FALSE_WORDS = frozenset({'false', '0', 'no', 'off'})
DEVICE_RE = re.compile(r'(cpu|gpu|cuda)(:\d+)?')
# Forced when PLAY_MODE is true, as the original did: one agent plays greedily, nothing trains or saves.
PLAY_MODE_OVERRIDES: dict[str, object] = {
    'AGENTS': 1,
    'PREDICTORS': 1,
    'TRAINERS': 1,
    'DYNAMIC_SETTINGS': False,
    'LOAD_CHECKPOINT': True,
    'TRAIN_MODELS': False,
    'SAVE_MODELS': False,
}
# The presets of a checkout; the automatic CPU preset is picked from them by the network the task uses.
PRESETS = Path(__file__).resolve().parent.parent / 'configs'
AUTO_PRESETS = {'cnn': 'cpu.toml', 'mlp': 'classic.toml'}
# Keys an automatic preset never sets: the task is the user's choice (or Config.py's), never the preset's.
AUTO_PRESET_SKIPPED = frozenset({'ATARI_GAME'})
ORIGINAL_HINT = "for the original's settings instead: --config configs/pong.toml (KEY=VALUE arguments still win)"


def setting_names() -> list[str]:
    """Every setting of Config.py, in file order (the order --help and config_to_dict use)."""
    return [k for k in vars(Config) if k.isupper() and not k.startswith('_')]


def _kind(name: str) -> type:
    """The type a setting's default has; bool is checked before int because bool is an int in Python."""
    default = getattr(Config, name)
    for t in (bool, int, float, str):
        if isinstance(default, t):
            return t
    raise TypeError(f'Config.{name} has an unsupported default type {type(default).__name__}')  # pragma: no cover


def _from(source: str) -> str:
    return source if source == CLI or source.startswith('a ') else f'the file {source}'


def _type_error(name: str, value: object, source: str, expected: str, fix: str) -> ConfigError:
    return ConfigError(f'bad value for {name}: {value!r} (from {_from(source)}); expected {expected}; {fix}')


def _parse_bool(name: str, text: str, source: str) -> bool:
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise _type_error(name, text, source, 'a boolean: true/false, 1/0, yes/no or on/off',
                      f'write e.g. {name}=true or {name}=false')


def _parse_int(name: str, text: str, source: str) -> int:
    s = text.strip()
    try:
        return int(s)
    except ValueError:
        pass
    try:
        f = float(s)
    except ValueError:
        f = math.nan
    if math.isfinite(f) and f.is_integer():
        return int(f)
    raise _type_error(name, text, source, 'a whole number such as 100, -3, 1e6 or 100_000',
                      f'write e.g. {name}={getattr(Config, name)}')


def _parse_float(name: str, text: str, source: str) -> float:
    try:
        f = float(text.strip())
    except ValueError:
        f = math.nan
    if math.isfinite(f):
        return f
    raise _type_error(name, text, source, 'a finite number such as 0.99, 3e-4 or 1_000.5',
                      f'write e.g. {name}={getattr(Config, name)}')


def _parse_text(name: str, text: str, source: str) -> object:
    """Parses a string (a KEY=VALUE value, or a quoted TOML value) by the type of the setting's default."""
    kind = _kind(name)
    if kind is bool:
        return _parse_bool(name, text, source)
    if kind is int:
        return _parse_int(name, text, source)
    if kind is float:
        return _parse_float(name, text, source)
    return text


def _coerce(name: str, value: object, source: str) -> object:
    """Checks a typed value (from TOML or a checkpoint) against the type of the setting's default."""
    if isinstance(value, str):
        return _parse_text(name, value, source)
    kind = _kind(name)
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise _type_error(name, value, source, 'a boolean', f'write {name} = true or {name} = false')
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        raise _type_error(name, value, source, 'a whole number', f'write e.g. {name} = {getattr(Config, name)}')
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise _type_error(name, value, source, 'a finite number', f'write e.g. {name} = {getattr(Config, name)}')
    raise _type_error(name, value, source, 'a string', f'put the value in quotes, e.g. {name} = "{value}"')


def _unknown(name: str, source: str) -> ConfigError:
    names = setting_names()
    guess = difflib.get_close_matches(name, names, n=1) or difflib.get_close_matches(name.upper(), names, n=1)
    hint = f"; did you mean '{guess[0]}'?" if guess else '.'
    return ConfigError(f"unknown setting {name!r} (from {_from(source)}){hint} {HELP_HINT}")


def _read_toml(path: str) -> dict[str, object]:
    """Reads one preset: a flat `KEY = value` table; `[section]` tables only group keys and are flattened."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f'config file {path!r} (from --config) does not exist; '
                          'fix the path, e.g. --config configs/pong.toml') from None
    except OSError as e:
        raise ConfigError(f'config file {path!r} (from --config) cannot be read: {e.strerror}; '
                          'fix the path or its permissions') from None
    try:
        data = tomllib.loads(raw.decode('utf-8'))
    except UnicodeDecodeError as e:
        raise ConfigError(f'config file {path!r} is not UTF-8 text ({e.reason} at byte {e.start}); '
                          'save it as UTF-8 TOML') from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f'config file {path!r} is not valid TOML: {e}; '
                          'write one KEY = value per line, strings in quotes') from None
    flat: dict[str, object] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            for sub, subvalue in value.items():
                if isinstance(subvalue, dict):
                    raise ConfigError(f'config file {path!r}: table [{key}.{sub}] is nested too deep; '
                                      'use at most one level of [section] tables')
                if sub in flat:
                    raise ConfigError(f'config file {path!r}: setting {sub!r} is given twice '
                                      f'(again in [{key}]); keep one of them')
                flat[sub] = subvalue
        else:
            if key in flat:  # pragma: no cover - TOML itself rejects duplicate top-level keys
                raise ConfigError(f'config file {path!r}: setting {key!r} is given twice; keep one of them')
            flat[key] = value
    return flat


def parse_settings(argv: list[str], *, auto: bool = False) -> Config:
    """Builds the effective settings from Config.py, `--config FILE.toml` files (in order), then `KEY=VALUE`.

    With `auto` (the training command), no `--config` and the model on the CPU, `auto_preset`'s file takes the
    place of the missing `--config` (its ATARI_GAME excepted); play mode never gets it (the checkpoint decides).
    `-h`/`--help` prints every setting and raises SystemExit(0). Play mode forces the original's overrides.
    The result is a picklable Config instance whose attributes shadow the class defaults; it is validated.
    """
    if any(a in ('-h', '--help') for a in argv):
        print_help()
        raise SystemExit(0)
    files: list[str] = []
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == '--config':
            if i + 1 >= len(argv) or not argv[i + 1]:
                raise ConfigError('--config needs a file name after it, e.g. --config configs/pong.toml')
            files.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith('--config='):
            path = arg[len('--config='):]
            if not path:
                raise ConfigError('--config= needs a file name, e.g. --config=configs/pong.toml')
            files.append(path)
        elif '=' in arg and not arg.startswith('-'):
            key, value = arg.split('=', 1)
            if not key:
                raise ConfigError(f'argument {arg!r} has no setting name before "="; write KEY=VALUE, e.g. AGENTS=8')
            pairs.append((key.strip(), value))
        else:
            raise ConfigError(f'unexpected argument {arg!r}: arguments are KEY=VALUE (e.g. AGENTS=8), '
                              f'--config FILE.toml, or --help. {HELP_HINT}')
        i += 1

    cfg, sources = _layer(files, pairs)
    if auto and not files and not cfg.PLAY_MODE:
        validate(cfg, sources=sources)  # before auto_preset creates an environment with these values
        preset = auto_preset(cfg)
        if preset is not None:
            cfg, sources = _layer([str(preset)], pairs, skipped=AUTO_PRESET_SKIPPED)
    if cfg.PLAY_MODE:
        for key, value in PLAY_MODE_OVERRIDES.items():
            setattr(cfg, key, value)
            sources[key] = 'a play-mode override'
    validate(cfg, sources=sources)
    return cfg


def _layer(files: list[str], pairs: list[tuple[str, str]],
           skipped: frozenset[str] = frozenset()) -> tuple[Config, dict[str, str]]:
    """Config.py's defaults, then each file's keys (but `skipped`), then the KEY=VALUE pairs; and each key's source."""
    known = set(setting_names())
    cfg = Config()
    sources: dict[str, str] = {}
    for path in files:
        for key, value in _read_toml(path).items():
            if key not in known:
                raise _unknown(key, path)
            if key not in skipped:
                setattr(cfg, key, _coerce(key, value, path))
                sources[key] = path
    for key, value in pairs:
        if key not in known:
            raise _unknown(key, CLI)
        setattr(cfg, key, _parse_text(key, value, CLI))
        sources[key] = CLI
    return cfg, sources


def model_on_cpu(device: str) -> bool:
    """Whether DEVICE puts the model on the CPU: asked for, or a GPU asked for where CUDA is not available."""
    if device.strip().lower().startswith('cpu'):
        return True
    import torch  # only here: agent processes import this module and need no torch

    return not torch.cuda.is_available()


def auto_preset(cfg: Config) -> Path | None:
    """The preset for a model on the CPU: configs/cpu.toml for image tasks (Atari), configs/classic.toml for
    vector tasks (CartPole, Acrobot, ...); None when the model runs on a GPU. Logs which one applies and why.

    The choice needs the observation's shape, so it creates (and closes) one environment of cfg.ATARI_GAME.
    """
    if not model_on_cpu(cfg.DEVICE):
        return None
    from ga3c.Environment import probe_environment  # gymnasium and ALE: not for agents that only read settings

    network = 'cnn' if len(probe_environment(cfg)[0]) == 3 else 'mlp'
    path = PRESETS / AUTO_PRESETS[network]
    shown = f'configs/{path.name}'
    if not path.is_file():
        log.warning('the model runs on the CPU and no --config was given, but the CPU preset %s is missing (a '
                    "package installed without its checkout): using Config.py's values, sized for a GPU", shown)
        return None
    log.info('the model runs on the CPU and no --config was given: using the CPU preset %s (Config.py holds the '
             "original's values, sized for a GPU); KEY=VALUE arguments win over it, and the game stays %s",
             shown, cfg.ATARI_GAME)
    log.info(ORIGINAL_HINT)
    return path


def _check(ok: bool, cfg: Config, name: str, expected: str, fix: str, sources: Mapping[str, str]) -> None:
    if not ok:
        src = sources.get(name, 'a Config.py default')
        raise ConfigError(f'bad value for {name}: {getattr(cfg, name)!r} (from {_from(src)}); '
                          f'expected {expected}; {fix}')


def validate(cfg: Config, *, sources: Mapping[str, str] | None = None) -> None:
    """Checks every value before anything starts; raises ConfigError for the first problem found.

    `sources` maps a key to where its value came from (a file path or the command line), for the message.
    """
    src: Mapping[str, str] = sources or {}
    for name in setting_names():  # types first, so the range checks below can compare safely
        value = getattr(cfg, name)
        kind = _kind(name)
        ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if ok and kind is float:
            ok = math.isfinite(value)
        _check(ok, cfg, name, f'a {kind.__name__}', f'set {name} to a {kind.__name__} value', src)

    def at_least(name: str, low: float, why: str = '') -> None:
        what = f' ({why})' if why else ''
        _check(getattr(cfg, name) >= low, cfg, name, f'a value >= {low}{what}', f'set {name} to at least {low}', src)

    def positive(name: str) -> None:
        _check(getattr(cfg, name) > 0, cfg, name, 'a value > 0', f'set {name} to a positive value', src)

    def fraction(name: str, closed: bool) -> None:
        v = getattr(cfg, name)
        ok = 0 <= v <= 1 if closed else 0 <= v < 1
        rng = '[0, 1]' if closed else '[0, 1)'
        _check(ok, cfg, name, f'a value in {rng}', f'set {name} to a value in {rng}', src)

    def one_of(name: str, choices: tuple[str, ...]) -> None:
        listed = ', '.join(repr(c) for c in choices)
        _check(getattr(cfg, name) in choices, cfg, name, f'one of {listed}', f'set {name} to one of {listed}', src)

    def nonempty(name: str) -> None:
        _check(getattr(cfg, name).strip() != '', cfg, name, 'a non-empty string',
               f'set {name} to a non-empty value (default {getattr(Config, name)!r})', src)

    for name in ('AGENTS', 'PREDICTORS', 'TRAINERS', 'MAX_AGENTS', 'MAX_PREDICTORS', 'MAX_TRAINERS', 'ENVS_PER_AGENT'):
        at_least(name, 1)
    for name, cap in (('AGENTS', 'MAX_AGENTS'), ('PREDICTORS', 'MAX_PREDICTORS'), ('TRAINERS', 'MAX_TRAINERS')):
        _check(getattr(cfg, name) <= getattr(cfg, cap), cfg, name, f'at most {cap}={getattr(cfg, cap)}',
               f'lower {name} or raise {cap}', src)
    _check(DEVICE_RE.fullmatch(cfg.DEVICE) is not None, cfg, 'DEVICE',
           "'cpu', 'cpu:N', 'gpu', 'gpu:N', 'cuda' or 'cuda:N'", 'write e.g. DEVICE=gpu:0 or DEVICE=cpu', src)
    at_least('TORCH_THREADS', 0)
    one_of('PRECISION', ('fp32', 'bf16', 'auto'))
    positive('DYNAMIC_SETTINGS_STEP_WAIT')
    positive('DYNAMIC_SETTINGS_INITIAL_WAIT')
    at_least('DYNAMIC_SETTINGS_MARGIN', 0, '0 = keep any gain, as the original')
    at_least('DYNAMIC_SETTINGS_HOLD_MAX', 1, '1 = one window between trials, as the original')

    nonempty('ATARI_GAME')
    at_least('LOAD_EPISODE', 0, '0 means the latest checkpoint')
    at_least('FRAMESKIP', 1)
    fraction('REPEAT_ACTION_PROBABILITY', closed=True)
    at_least('SEED', 0)

    fraction('DISCOUNT', closed=True)
    at_least('TIME_MAX', 1)
    _check(cfg.REWARD_MIN <= cfg.REWARD_MAX, cfg, 'REWARD_MIN', f'at most REWARD_MAX={cfg.REWARD_MAX}',
           'set REWARD_MIN <= REWARD_MAX', src)
    at_least('MAX_QUEUE_SIZE', 1)
    at_least('PREDICTION_BATCH_SIZE', 1)
    at_least('STACKED_FRAMES', 1)
    for name in ('IMAGE_WIDTH', 'IMAGE_HEIGHT'):
        at_least(name, MIN_IMAGE_SIZE, f"the network's two conv layers need at least {MIN_IMAGE_SIZE} pixels")
    one_of('RESIZE_INTERPOLATION', ('linear', 'area', 'pillow'))
    one_of('EPISODE_START', ('repeat', 'noop'))
    at_least('EPISODES', 1)
    at_least('ANNEALING_EPISODE_COUNT', 1)
    at_least('ANNEALING_STEP_COUNT', 0, '0 = anneal over ANNEALING_EPISODE_COUNT episodes')
    at_least('MAX_STEPS', 0, '0 = no limit')
    at_least('MAX_SECONDS', 0, '0 = no limit')
    at_least('TRIM_SECONDS', 0, '0 = never')
    at_least('MALLOC_ARENAS', 1)
    at_least('BETA_START', 0)
    at_least('BETA_END', 0)
    positive('LEARNING_RATE_START')
    positive('LEARNING_RATE_END')
    fraction('RMSPROP_DECAY', closed=False)
    fraction('RMSPROP_MOMENTUM', closed=False)
    positive('RMSPROP_EPSILON')
    positive('GRAD_CLIP_NORM')
    at_least('LOG_EPSILON', 0)
    at_least('TRAINING_MIN_BATCH_SIZE', 0)
    fraction('GAE_LAMBDA', closed=True)
    positive('VALUE_LOSS_COEF')
    one_of('LOSS_REDUCTION', ('sum', 'mean'))
    one_of('OPTIMIZER', ('rmsprop_tf', 'adam'))
    one_of('WEIGHT_INIT', ('original', 'orthogonal'))
    positive('ADAM_EPSILON')
    fraction('PPO_CLIP', closed=False)
    at_least('PPO_EPOCHS', 1)
    _check(cfg.PPO_EPOCHS == 1 or cfg.PPO_CLIP > 0, cfg, 'PPO_EPOCHS',
           '1 without PPO_CLIP (further steps on the same batch, unclipped, move the policy without bound)',
           'set PPO_CLIP (PPO uses 0.1-0.2) or PPO_EPOCHS=1', src)
    _check(not (cfg.DUAL_RMSPROP and cfg.OPTIMIZER != 'rmsprop_tf'), cfg, 'DUAL_RMSPROP',
           "False with OPTIMIZER='adam' (two optimizers, one per loss, are the original's RMSProp variant)",
           "set DUAL_RMSPROP=False or OPTIMIZER='rmsprop_tf'", src)
    one_of('POLICY_LAG_CORRECTION', ('none', 'vtrace'))
    positive('VTRACE_RHO')
    positive('VTRACE_C')
    at_least('MAX_POLICY_LAG', 0, '0 = keep all')
    _check(cfg.GAE_LAMBDA == 1.0 or cfg.POLICY_LAG_CORRECTION != 'vtrace', cfg, 'GAE_LAMBDA',
           "1.0 with POLICY_LAG_CORRECTION='vtrace' (V-trace computes its own targets and advantages)",
           "set GAE_LAMBDA=1.0 or POLICY_LAG_CORRECTION='none'", src)
    at_least('MLP_HIDDEN_SIZE', 1)
    one_of('NETWORK_TYPE', ('feedforward', 'lstm'))
    at_least('LSTM_SIZE', 1)

    for name in ('TENSORBOARD_UPDATE_FREQUENCY', 'SAVE_FREQUENCY', 'PRINT_STATS_FREQUENCY',
                 'STAT_ROLLING_MEAN_WINDOW'):
        at_least(name, 1)
    for name in ('RESULTS_FILENAME', 'NETWORK_NAME', 'CHECKPOINT_DIR', 'LOG_DIR'):
        nonempty(name)
    _check('/' not in cfg.NETWORK_NAME and '\\' not in cfg.NETWORK_NAME and cfg.NETWORK_NAME not in ('.', '..'),
           cfg, 'NETWORK_NAME', "a plain file name without '/' or '\\'",
           'put folders in CHECKPOINT_DIR and keep NETWORK_NAME a plain name', src)

    at_least('PLAY_EPISODES', 1)
    at_least('PLAY_NOOP_MAX', 0)
    _check(0 <= cfg.MIN_POLICY < 1, cfg, 'MIN_POLICY', 'a value in [0, 1)', 'set MIN_POLICY to e.g. 0.0', src)

    one_of('CLUSTER', ('', 'ray'))
    at_least('CLUSTER_AGENT_GROUPS', 0, '0 = one per CPU of the Ray cluster')
    at_least('CLUSTER_MAX_AGENT_GROUPS', 1)
    _check(cfg.CLUSTER_AGENT_GROUPS <= cfg.CLUSTER_MAX_AGENT_GROUPS, cfg, 'CLUSTER_AGENT_GROUPS',
           f'at most CLUSTER_MAX_AGENT_GROUPS={cfg.CLUSTER_MAX_AGENT_GROUPS}',
           'lower CLUSTER_AGENT_GROUPS or raise CLUSTER_MAX_AGENT_GROUPS', src)
    at_least('CLUSTER_ENVS_PER_GROUP', 1)
    # only where groups run: ENVS_PER_AGENT=16 on one machine must not trip over the groups' default of 8
    _check(cfg.CLUSTER != 'ray' or cfg.CLUSTER_ENVS_PER_GROUP % cfg.ENVS_PER_AGENT == 0, cfg,
           'CLUSTER_ENVS_PER_GROUP',
           f'a multiple of ENVS_PER_AGENT={cfg.ENVS_PER_AGENT} (a group rollout fills whole experience slots)',
           f'set CLUSTER_ENVS_PER_GROUP to e.g. '
           f'{cfg.ENVS_PER_AGENT * max(cfg.CLUSTER_ENVS_PER_GROUP // cfg.ENVS_PER_AGENT, 1)}', src)
    at_least('WEIGHT_SYNC_UPDATES', 1)
    if cfg.CLUSTER == 'ray' and importlib.util.find_spec('ray') is None:
        raise ConfigError("CLUSTER='ray' needs Ray, which is not installed: pip install 'ga3c[ray]' "
                          "(or pip install 'ray>=2.9'), or leave CLUSTER empty")


def config_to_dict(cfg: Config) -> dict[str, object]:
    """Every setting with its effective value, in file order: what checkpoints and logs record."""
    return {name: getattr(cfg, name) for name in setting_names()}


def changed_settings(cfg: Config) -> dict[str, object]:
    """The settings whose effective value is not Config.py's, in file order: what a preset and the command line
    changed, which is what a run's log must say for the run to be repeated."""
    return {name: value for name, value in config_to_dict(cfg).items() if value != getattr(Config, name)}


def settings_table(cfg: Config) -> str:
    """Every setting as a Markdown table (TensorBoard's text tab shows it), with Config.py's value beside each
    changed one."""
    changed = changed_settings(cfg)
    rows = [f"| {name} | {value!r} | {repr(getattr(Config, name)) if name in changed else ''} |"
            for name, value in config_to_dict(cfg).items()]
    return "\n".join(["| setting | value | Config.py's, where different |", "|---|---|---|", *rows])


def config_from_dict(d: Mapping[str, Any]) -> Config:
    """Rebuilds a Config from config_to_dict's output (e.g. a checkpoint's); unknown keys are ignored.

    Keys that a newer or older version lacks are skipped, so old checkpoints stay loadable; known values are
    type-checked like TOML values but not range-validated (call validate for that).
    """
    known = set(setting_names())
    cfg = Config()
    for key, value in d.items():
        if key in known:
            setattr(cfg, key, _coerce(key, value, 'a checkpoint'))
    return cfg


def _comments_and_sections() -> tuple[dict[str, str], dict[str, str]]:
    """Scans Config.py's source: the comment above each setting and the section each setting opens.

    A setting directly below another one without its own comment shares that one's comment (REWARD_MAX,
    MAX_TRAINERS); a line of '#' characters followed by a comment line starts a section.
    """
    comments: dict[str, str] = {}
    section_of: dict[str, str] = {}
    pending: list[str] = []
    last_comment = ''
    after_rule = False
    section = ''
    section_started = False
    prev_was_setting = False
    assign = re.compile(r'([A-Z][A-Z0-9_]*)\s*(?::[^=]*)?=')
    for raw in inspect.getsource(Config).splitlines():
        line = raw.strip()
        if line.startswith('#') and set(line) == {'#'} and len(line) > 3:
            after_rule = True
            pending, prev_was_setting = [], False
            continue
        if line.startswith('#'):
            text = line.lstrip('#').strip()
            if after_rule:
                section, section_started, after_rule = text, False, False
            else:
                pending.append(text)
            prev_was_setting = False
            continue
        after_rule = False
        m = assign.match(line)
        if m:
            name = m.group(1)
            if pending:
                last_comment = ' '.join(pending)
            elif not prev_was_setting:
                last_comment = ''
            comments[name] = last_comment
            if not section_started:
                section_of[name] = section
                section_started = True
            pending, prev_was_setting = [], True
        else:
            pending, prev_was_setting = [], False
    return comments, section_of


def help_text() -> str:
    """The --help text: usage, then every setting grouped by Config.py's sections, its default and comment."""
    comments, section_of = _comments_and_sections()
    out = [
        'usage: ga3c [--config FILE.toml ...] [KEY=VALUE ...]',
        '',
        'Settings come from ga3c/Config.py, then each --config file in order, then KEY=VALUE arguments (later win).',
        'Booleans take true/false, 1/0, yes/no, on/off; integers take 100, 1e6 or 100_000.',
    ]
    for name in setting_names():
        if name in section_of:
            out += ['', f'{section_of[name]}:']
        comment = comments.get(name, '')
        out.append(f'  {name}={getattr(Config, name)!r}' + (f'\n      {comment}' if comment else ''))
    return '\n'.join(out)


def print_help(file: TextIO | None = None) -> None:
    """Prints help_text() to `file` (stdout by default)."""
    print(help_text(), file=file or sys.stdout)
