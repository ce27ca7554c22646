"""Settings: parse rules, precedence, TOML presets, validation and its one-line error messages."""

import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ga3c.Config import Config
from ga3c.errors import ConfigError
from ga3c.settings import (
    changed_settings,
    config_from_dict,
    config_to_dict,
    help_text,
    parse_settings,
    setting_names,
    settings_table,
    validate,
)

REPO = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def error_of(argv: list[str]) -> str:
    with pytest.raises(ConfigError) as e:
        parse_settings(argv)
    msg = str(e.value)
    assert '\n' not in msg
    return msg


# --- defaults and names -------------------------------------------------------------------------------------------

def test_defaults_are_config_py_and_instance():
    cfg = parse_settings([])
    assert isinstance(cfg, Config)
    assert cfg.AGENTS == 32 and cfg.DISCOUNT == 0.99 and cfg.ATARI_GAME == 'PongDeterministic-v0'
    assert vars(cfg) == {}  # nothing overridden: class defaults show through


def test_setting_names_in_file_order():
    names = setting_names()
    assert names[:4] == ['ATARI_GAME', 'PLAY_MODE', 'TRAIN_MODELS', 'LOAD_CHECKPOINT']
    assert names[-2:] == ['MIN_POLICY', 'USE_LOG_SOFTMAX']
    assert names.index('AGENTS') < names.index('PREDICTORS') < names.index('TRAINERS')
    assert len(names) == len(set(names))
    assert 'AGENTS' in names and 'MAX_TRAINERS' in names


# --- parse rules --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('text,expected', [
    ('true', True), ('True', True), ('TRUE', True), ('1', True), ('yes', True), ('on', True), ('On', True),
    ('false', False), ('False', False), ('0', False), ('no', False), ('off', False), ('OFF', False),
])
def test_bool_words(text, expected):
    assert parse_settings([f'TENSORBOARD={text}']).TENSORBOARD is expected


def test_bool_false_means_false():
    # The original read KEY=False as True (any non-empty string): never again.
    assert parse_settings(['TRAIN_MODELS=False']).TRAIN_MODELS is False
    assert parse_settings(['DYNAMIC_SETTINGS=false']).DYNAMIC_SETTINGS is False


@pytest.mark.parametrize('text', ['', 'maybe', '2', 'tru', 'none'])
def test_bool_rejects_other_words(text):
    msg = error_of([f'TENSORBOARD={text}'])
    assert 'TENSORBOARD' in msg and repr(text) in msg and 'true/false' in msg and 'command line' in msg


@pytest.mark.parametrize('text,expected', [
    ('100', 100), ('1e6', 1_000_000), ('100_000', 100_000), ('-3', -3), ('2.0', 2), (' 7 ', 7), ('1E3', 1000),
])
def test_int_forms(text, expected):
    if expected >= 0:
        got = parse_settings([f'MAX_STEPS={text}']).MAX_STEPS
    else:  # no integer setting may be negative: the parser itself is checked
        from ga3c.settings import _parse_int
        got = _parse_int('SEED', text, 'the command line')
    assert got == expected and type(got) is int


@pytest.mark.parametrize('text', ['0.5', '1.5e0', 'ten', '', '1e', 'inf', 'nan', '3,000'])
def test_int_rejects_non_integral(text):
    msg = error_of([f'EPISODES={text}'])
    assert msg.startswith('bad value for EPISODES: ')
    assert repr(text) in msg and 'whole number' in msg and 'EPISODES=400000' in msg


@pytest.mark.parametrize('text,expected', [
    ('3e-4', 0.0003), ('1', 1.0), ('1_000.5', 1000.5), ('0.95', 0.95), ('-0', 0.0),
])
def test_float_forms(text, expected):
    cfg = parse_settings([f'BETA_START={text}'])
    assert cfg.BETA_START == expected and type(cfg.BETA_START) is float


@pytest.mark.parametrize('text', ['fast', 'nan', 'inf', ''])
def test_float_rejects(text):
    msg = error_of([f'DISCOUNT={text}'])
    assert 'DISCOUNT' in msg and 'finite number' in msg


def test_str_takes_anything():
    cfg = parse_settings(['ATARI_GAME=ALE/Breakout-v5', 'VIDEO_PATH=', 'NETWORK_NAME=a=b'])
    assert cfg.ATARI_GAME == 'ALE/Breakout-v5' and cfg.VIDEO_PATH == '' and cfg.NETWORK_NAME == 'a=b'


def test_same_key_twice_last_wins():
    assert parse_settings(['AGENTS=4', 'AGENTS=6']).AGENTS == 6


# --- TOML files and precedence ------------------------------------------------------------------------------------

def test_precedence_config_then_toml_then_cli(tmp_path):
    f = write(tmp_path, 'a.toml', 'AGENTS = 8\nPREDICTORS = 3\nDISCOUNT = 0.9\n')
    cfg = parse_settings(['AGENTS=5', '--config', f])  # KEY=VALUE wins wherever it stands
    assert cfg.AGENTS == 5
    assert cfg.PREDICTORS == 3
    assert cfg.DISCOUNT == 0.9
    assert cfg.TRAINERS == 2  # Config.py default


def test_config_given_twice_applied_in_order(tmp_path):
    a = write(tmp_path, 'a.toml', 'AGENTS = 8\nPREDICTORS = 3\n')
    b = write(tmp_path, 'b.toml', 'AGENTS = 16\nTRAINERS = 4\n')
    cfg = parse_settings(['--config', a, f'--config={b}'])
    assert (cfg.AGENTS, cfg.PREDICTORS, cfg.TRAINERS) == (16, 3, 4)
    cfg = parse_settings([f'--config={b}', '--config', a])
    assert (cfg.AGENTS, cfg.PREDICTORS, cfg.TRAINERS) == (8, 3, 4)


def test_toml_sections_are_flattened(tmp_path):
    f = write(tmp_path, 's.toml', 'ATARI_GAME = "BreakoutDeterministic-v4"\n[system]\nAGENTS = 12\n'
                                  'DYNAMIC_SETTINGS = false\n[algorithm]\nTIME_MAX = 20\n')
    cfg = parse_settings(['--config', f])
    assert (cfg.ATARI_GAME, cfg.AGENTS, cfg.DYNAMIC_SETTINGS, cfg.TIME_MAX) == \
        ('BreakoutDeterministic-v4', 12, False, 20)


def test_toml_value_types(tmp_path):
    f = write(tmp_path, 't.toml', 'LEARNING_RATE_START = 1\nEPISODES = 1e6\nMAX_STEPS = "100_000"\n'
                                  'TENSORBOARD = "yes"\nSEED = 7\n')
    cfg = parse_settings(['--config', f])
    assert cfg.LEARNING_RATE_START == 1.0 and type(cfg.LEARNING_RATE_START) is float
    assert cfg.EPISODES == 1_000_000 and type(cfg.EPISODES) is int
    assert cfg.MAX_STEPS == 100_000 and cfg.TENSORBOARD is True and cfg.SEED == 7


@pytest.mark.parametrize('line,expected', [
    ('AGENTS = true', 'a whole number'),
    ('AGENTS = 2.5', 'a whole number'),
    ('AGENTS = "many"', 'a whole number'),
    ('DISCOUNT = false', 'a finite number'),
    ('TENSORBOARD = 2', 'a boolean'),
    ('ATARI_GAME = 5', 'a string'),
    ('AGENTS = [1, 2]', 'a whole number'),
])
def test_toml_wrong_types_name_the_file(tmp_path, line, expected):
    f = write(tmp_path, 'w.toml', line + '\n')
    msg = error_of(['--config', f])
    assert line.split()[0] in msg and expected in msg and f in msg


def test_toml_missing_file(tmp_path):
    missing = str(tmp_path / 'nope.toml')
    msg = error_of(['--config', missing])
    assert missing in msg and 'does not exist' in msg


def test_toml_invalid(tmp_path):
    f = write(tmp_path, 'bad.toml', 'AGENTS = 4\nPREDICTORS = = 2\n')
    msg = error_of(['--config', f])
    assert f in msg and 'not valid TOML' in msg
    assert re.search(r'line 2, column \d+', msg)


def test_toml_unknown_key_names_file_and_suggests(tmp_path):
    f = write(tmp_path, 'u.toml', '[system]\nAGENT = 4\n')
    msg = error_of(['--config', f])
    assert msg == f"unknown setting 'AGENT' (from the file {f}); did you mean 'AGENTS'? " \
                  'Run with --help to list every setting.'


def test_toml_nested_and_duplicate_tables(tmp_path):
    f = write(tmp_path, 'n.toml', '[a.b]\nAGENTS = 4\n')
    assert 'nested' in error_of(['--config', f])
    f = write(tmp_path, 'd.toml', '[a]\nAGENTS = 4\n[b]\nAGENTS = 5\n')
    assert 'twice' in error_of(['--config', f])


def test_repo_presets_all_load():
    presets = sorted((REPO / 'configs').glob('*.toml'))
    assert any(p.name == 'pong.toml' for p in presets)
    for p in presets:
        cfg = parse_settings(['--config', str(p)])
        validate(cfg)


def test_pong_preset_values():
    cfg = parse_settings(['--config', str(REPO / 'configs' / 'pong.toml')])
    assert cfg.ATARI_GAME == 'PongDeterministic-v4'
    assert (cfg.AGENTS, cfg.PREDICTORS, cfg.TRAINERS, cfg.DYNAMIC_SETTINGS) == (32, 2, 2, True)
    assert (cfg.FRAMESKIP, cfg.REPEAT_ACTION_PROBABILITY) == (4, 0.0)
    assert (cfg.LEARNING_RATE_START, cfg.RMSPROP_EPSILON, cfg.TIME_MAX) == (0.0003, 0.1, 5)


# --- command-line errors ------------------------------------------------------------------------------------------

def test_unknown_key_suggests_nearest():
    assert error_of(['AGENT=4']) == ("unknown setting 'AGENT' (from the command line); did you mean 'AGENTS'? "
                                     'Run with --help to list every setting.')
    assert "did you mean 'DISCOUNT'" in error_of(['discount=0.9'])
    msg = error_of(['ZZZZZZ=1'])
    assert "unknown setting 'ZZZZZZ'" in msg and 'did you mean' not in msg and '--help' in msg


@pytest.mark.parametrize('argv', [['AGENTS'], ['--agents=3'], ['-x'], ['--config'], ['--config='], ['=3']])
def test_bad_argument_forms(argv):
    msg = error_of(argv)
    assert '--config' in msg or 'KEY=VALUE' in msg


# --- validation ---------------------------------------------------------------------------------------------------

def test_agents_zero_out_of_range():
    assert error_of(['AGENTS=0']) == ('bad value for AGENTS: 0 (from the command line); expected a value >= 1; '
                                      'set AGENTS to at least 1')


def test_discount_above_one():
    msg = error_of(['DISCOUNT=1.5'])
    assert msg == ('bad value for DISCOUNT: 1.5 (from the command line); expected a value in [0, 1]; '
                   'set DISCOUNT to a value in [0, 1]')


def test_image_width_negative():
    msg = error_of(['IMAGE_WIDTH=-3'])
    assert msg.startswith('bad value for IMAGE_WIDTH: -3 (from the command line); expected a value >= 36')
    assert 'conv layers' in msg


def test_range_error_names_toml_source(tmp_path):
    f = write(tmp_path, 'r.toml', 'TIME_MAX = 0\n')
    msg = error_of(['--config', f])
    assert 'TIME_MAX: 0' in msg and f in msg


@pytest.mark.parametrize('arg,key', [
    ('AGENTS=200', 'AGENTS'), ('PREDICTORS=9', 'PREDICTORS'), ('TRAINERS=0', 'TRAINERS'),
    ('ENVS_PER_AGENT=0', 'ENVS_PER_AGENT'), ('TIME_MAX=0', 'TIME_MAX'), ('REWARD_MIN=2', 'REWARD_MIN'),
    ('PREDICTION_BATCH_SIZE=0', 'PREDICTION_BATCH_SIZE'), ('STACKED_FRAMES=0', 'STACKED_FRAMES'),
    ('IMAGE_HEIGHT=35', 'IMAGE_HEIGHT'), ('EPISODES=0', 'EPISODES'),
    ('ANNEALING_EPISODE_COUNT=0', 'ANNEALING_EPISODE_COUNT'), ('ANNEALING_STEP_COUNT=-1', 'ANNEALING_STEP_COUNT'),
    ('LEARNING_RATE_START=0', 'LEARNING_RATE_START'),
    ('LEARNING_RATE_END=-1e-4', 'LEARNING_RATE_END'), ('RMSPROP_DECAY=1', 'RMSPROP_DECAY'),
    ('RMSPROP_MOMENTUM=-0.1', 'RMSPROP_MOMENTUM'), ('RMSPROP_EPSILON=0', 'RMSPROP_EPSILON'),
    ('GRAD_CLIP_NORM=0', 'GRAD_CLIP_NORM'), ('LOG_EPSILON=-1', 'LOG_EPSILON'),
    ('TRAINING_MIN_BATCH_SIZE=-1', 'TRAINING_MIN_BATCH_SIZE'), ('MAX_STEPS=-1', 'MAX_STEPS'),
    ('MAX_SECONDS=-5', 'MAX_SECONDS'), ('TRIM_SECONDS=-1', 'TRIM_SECONDS'), ('MAX_QUEUE_SIZE=0', 'MAX_QUEUE_SIZE'),
    ('FRAMESKIP=0', 'FRAMESKIP'), ('MALLOC_ARENAS=0', 'MALLOC_ARENAS'),
    ('REPEAT_ACTION_PROBABILITY=1.01', 'REPEAT_ACTION_PROBABILITY'), ('BETA_END=-0.1', 'BETA_END'),
    ('DYNAMIC_SETTINGS_STEP_WAIT=0', 'DYNAMIC_SETTINGS_STEP_WAIT'),
    ('DYNAMIC_SETTINGS_MARGIN=-0.1', 'DYNAMIC_SETTINGS_MARGIN'),
    ('SAVE_FREQUENCY=0', 'SAVE_FREQUENCY'), ('PRINT_STATS_FREQUENCY=0', 'PRINT_STATS_FREQUENCY'),
    ('STAT_ROLLING_MEAN_WINDOW=0', 'STAT_ROLLING_MEAN_WINDOW'),
    ('TENSORBOARD_UPDATE_FREQUENCY=0', 'TENSORBOARD_UPDATE_FREQUENCY'),
    ('MIN_POLICY=1', 'MIN_POLICY'), ('POLICY_LAG_CORRECTION=retrace', 'POLICY_LAG_CORRECTION'),
    ('VTRACE_RHO=0', 'VTRACE_RHO'), ('VTRACE_C=-1', 'VTRACE_C'), ('MAX_POLICY_LAG=-1', 'MAX_POLICY_LAG'),
    ('PRECISION=fp16', 'PRECISION'), ('RESIZE_INTERPOLATION=cubic', 'RESIZE_INTERPOLATION'),
    ('DEVICE=tpu', 'DEVICE'), ('DEVICE=cuda:', 'DEVICE'), ('DEVICE=/gpu:0', 'DEVICE'),
    ('TORCH_THREADS=-1', 'TORCH_THREADS'), ('PLAY_EPISODES=0', 'PLAY_EPISODES'),
    ('PLAY_NOOP_MAX=-1', 'PLAY_NOOP_MAX'), ('NETWORK_NAME=', 'NETWORK_NAME'), ('NETWORK_NAME=a/b', 'NETWORK_NAME'),
    ('MLP_HIDDEN_SIZE=0', 'MLP_HIDDEN_SIZE'), ('SEED=-1', 'SEED'), ('ATARI_GAME= ', 'ATARI_GAME'),
    ('RESULTS_FILENAME=', 'RESULTS_FILENAME'), ('CHECKPOINT_DIR=', 'CHECKPOINT_DIR'), ('LOG_DIR=', 'LOG_DIR'),
    ('LOAD_EPISODE=-1', 'LOAD_EPISODE'),
    ('GAE_LAMBDA=1.1', 'GAE_LAMBDA'), ('GAE_LAMBDA=-0.1', 'GAE_LAMBDA'), ('VALUE_LOSS_COEF=0', 'VALUE_LOSS_COEF'),
    ('LOSS_REDUCTION=avg', 'LOSS_REDUCTION'), ('OPTIMIZER=sgd', 'OPTIMIZER'), ('ADAM_EPSILON=0', 'ADAM_EPSILON'),
    ('PPO_CLIP=-0.1', 'PPO_CLIP'), ('PPO_CLIP=1', 'PPO_CLIP'), ('PPO_EPOCHS=0', 'PPO_EPOCHS'),
    ('WEIGHT_INIT=xavier', 'WEIGHT_INIT'),
])
def test_ranges(arg, key):
    msg = error_of([arg])
    assert msg.startswith(f'bad value for {key}: ') and 'expected' in msg


def test_learning_options_that_do_not_combine():
    assert error_of(['GAE_LAMBDA=0.95', 'POLICY_LAG_CORRECTION=vtrace']) == (
        "bad value for GAE_LAMBDA: 0.95 (from the command line); expected 1.0 with POLICY_LAG_CORRECTION='vtrace' "
        "(V-trace computes its own targets and advantages); set GAE_LAMBDA=1.0 or POLICY_LAG_CORRECTION='none'")
    msg = error_of(['OPTIMIZER=adam', 'DUAL_RMSPROP=true'])
    assert msg.startswith('bad value for DUAL_RMSPROP: True')
    assert "set DUAL_RMSPROP=False or OPTIMIZER='rmsprop_tf'" in msg
    assert error_of(['PPO_EPOCHS=4']) == (
        "bad value for PPO_EPOCHS: 4 (from the command line); expected 1 without PPO_CLIP (further steps on the same "
        "batch, unclipped, move the policy without bound); set PPO_CLIP (PPO uses 0.1-0.2) or PPO_EPOCHS=1")
    assert parse_settings(['PPO_EPOCHS=4', 'PPO_CLIP=0.2', 'POLICY_LAG_CORRECTION=vtrace']).PPO_EPOCHS == 4
    assert parse_settings(['PRECISION=auto']).PRECISION == 'auto'
    cfg = parse_settings(['GAE_LAMBDA=0.95', 'NORMALIZE_ADVANTAGES=true', 'VALUE_LOSS_COEF=0.5',
                          'LOSS_REDUCTION=mean', 'OPTIMIZER=adam', 'ADAM_EPSILON=1e-8', 'NETWORK_TYPE=lstm',
                          'WEIGHT_INIT=orthogonal'])
    validate(cfg)
    assert (cfg.GAE_LAMBDA, cfg.NORMALIZE_ADVANTAGES, cfg.OPTIMIZER, cfg.WEIGHT_INIT) == (0.95, True, 'adam',
                                                                                           'orthogonal')


def test_learning_options_are_off_by_default():
    """The original's algorithm: n-step advantages, summed losses, the value loss at weight 1, TF's RMSProp, and
    its initialisation."""
    assert (Config.GAE_LAMBDA, Config.NORMALIZE_ADVANTAGES, Config.VALUE_LOSS_COEF, Config.LOSS_REDUCTION,
            Config.OPTIMIZER, Config.WEIGHT_INIT) == (1.0, False, 1.0, 'sum', 'rmsprop_tf', 'original')
    assert Config.ANNEALING_STEP_COUNT == 0  # the original's schedule counts episodes


@pytest.mark.parametrize('arg', ['DEVICE=cpu', 'DEVICE=cpu:0', 'DEVICE=gpu', 'DEVICE=gpu:1', 'DEVICE=cuda',
                                 'DEVICE=cuda:3', 'IMAGE_WIDTH=36', 'DISCOUNT=0', 'DISCOUNT=1',
                                 'AGENTS=128', 'MIN_POLICY=0.01', 'POLICY_LAG_CORRECTION=vtrace',
                                 'PRECISION=bf16', 'RESIZE_INTERPOLATION=area', 'MAX_AGENTS=4'])
def test_valid_edges(arg):
    if arg == 'MAX_AGENTS=4':
        parse_settings(['AGENTS=4', arg])
    else:
        parse_settings([arg])


def test_agents_above_max_agents_names_the_cap():
    msg = error_of(['MAX_AGENTS=4'])  # AGENTS stays 32
    assert 'AGENTS: 32' in msg and 'MAX_AGENTS=4' in msg


def test_validate_catches_wrong_types_set_by_code():
    cfg = Config()
    cfg.AGENTS = '4'
    with pytest.raises(ConfigError, match='AGENTS'):
        validate(cfg)
    cfg = Config()
    cfg.TENSORBOARD = 1
    with pytest.raises(ConfigError, match='TENSORBOARD'):
        validate(cfg)
    cfg = Config()
    cfg.DISCOUNT = 1  # an int for a float setting is fine
    validate(cfg)


# --- play mode ----------------------------------------------------------------------------------------------------

def test_play_mode_overrides():
    cfg = parse_settings(['PLAY_MODE=true', 'AGENTS=8', 'TRAINERS=4'])
    assert (cfg.AGENTS, cfg.PREDICTORS, cfg.TRAINERS) == (1, 1, 1)
    assert cfg.DYNAMIC_SETTINGS is False and cfg.LOAD_CHECKPOINT is True
    assert cfg.TRAIN_MODELS is False and cfg.SAVE_MODELS is False


def test_no_play_mode_no_overrides():
    cfg = parse_settings(['PLAY_MODE=False'])
    assert (cfg.AGENTS, cfg.TRAIN_MODELS, cfg.LOAD_CHECKPOINT) == (32, True, False)


# --- help ---------------------------------------------------------------------------------------------------------

def test_help_lists_every_setting_and_exits_zero(capsys):
    for flag in ('-h', '--help'):
        with pytest.raises(SystemExit) as e:
            parse_settings(['AGENTS=3', flag])
        assert e.value.code == 0
        out = capsys.readouterr().out
        for name in setting_names():
            assert re.search(rf'^  {name}=', out, re.M), name
        assert 'Number of agent processes' in out
        assert 'AGENTS=32' in out and "DEVICE='gpu:0'" in out
        assert 'Game configuration:' in out and 'Algorithm parameters:' in out and 'Log and save:' in out


def test_help_groups_and_shared_comments():
    text = help_text()
    lines = text.splitlines()
    # Settings sit under their Config.py section.
    assert lines.index('Algorithm parameters:') < lines.index('  DISCOUNT=0.99') < lines.index('Log and save:')
    # REWARD_MAX has no comment of its own: it shares REWARD_MIN's.
    i = lines.index('  REWARD_MAX=1.0')
    assert lines[i + 1].strip() == 'Reward clipping'


# --- dict round trip and pickling --------------------------------------------------------------------------------

def test_config_dict_round_trip():
    cfg = parse_settings(['AGENTS=7', 'DISCOUNT=0.95', 'TENSORBOARD=yes', 'NETWORK_NAME=pong'])
    d = config_to_dict(cfg)
    assert list(d) == setting_names()
    assert d['AGENTS'] == 7 and d['DISCOUNT'] == 0.95 and d['TENSORBOARD'] is True and d['TRAINERS'] == 2
    back = config_from_dict(d)
    assert isinstance(back, Config) and config_to_dict(back) == d


def test_changed_settings_and_the_settings_table(tmp_path):
    """What a run logs (the settings not Config.py's, from a file and the command line) and shows in TensorBoard
    (every setting, Config.py's value beside the changed ones)."""
    assert changed_settings(Config()) == {}
    path = write(tmp_path, 'p.toml', 'TIME_MAX = 10\nDISCOUNT = 0.5\n')
    cfg = parse_settings(['--config', path, 'AGENTS=3', 'DISCOUNT=0.99', 'NETWORK_NAME=pong'])
    changed = changed_settings(cfg)
    assert changed == {'AGENTS': 3, 'TIME_MAX': 10, 'NETWORK_NAME': 'pong'}  # DISCOUNT is back at Config.py's
    assert list(changed) == [n for n in setting_names() if n in changed]
    lines = settings_table(cfg).splitlines()
    assert lines[:2] == ["| setting | value | Config.py's, where different |", '|---|---|---|']
    rows = {cells[1].strip(): [c.strip() for c in cells[2:4]] for cells in (line.split('|') for line in lines[2:])}
    assert list(rows) == setting_names()
    assert rows['AGENTS'] == ['3', repr(Config.AGENTS)] and rows['TIME_MAX'] == ['10', repr(Config.TIME_MAX)]
    assert rows['NETWORK_NAME'] == ["'pong'", repr(Config.NETWORK_NAME)] and rows['DISCOUNT'] == ['0.99', '']


def test_config_from_dict_ignores_unknown_and_checks_types():
    cfg = config_from_dict({'AGENTS': 3, 'OLD_SETTING': 1, 'EPISODES': 1e3})
    assert cfg.AGENTS == 3 and cfg.EPISODES == 1000 and not hasattr(cfg, 'OLD_SETTING')
    with pytest.raises(ConfigError, match='checkpoint'):
        config_from_dict({'AGENTS': 2.5})


def test_parsed_config_pickles():
    cfg = parse_settings(['AGENTS=5', 'DEVICE=cpu'])
    back = pickle.loads(pickle.dumps(cfg))
    assert isinstance(back, Config)
    assert back.AGENTS == 5 and back.DEVICE == 'cpu' and back.DISCOUNT == 0.99


def test_no_torch_import():
    code = 'import sys, ga3c.settings; sys.exit(1 if "torch" in sys.modules else 0)'
    assert subprocess.run([sys.executable, '-c', code], cwd=REPO).returncode == 0
