"""Checkpoints: round trip, atomic writes, finding by content, clear errors."""

import os

import numpy as np
import pytest
import torch

from ga3c import Checkpoint
from ga3c.Checkpoint import check_compatible, find_checkpoint, load_checkpoint, make_meta, save_checkpoint
from ga3c.Config import Config
from ga3c.errors import CheckpointError
from ga3c.NetworkVP import NetworkVP

SHAPE, ACTIONS = (20, 20, 2), 4


def make_net(seed=0, **kw):
    cfg = Config()
    cfg.SEED = seed
    cfg.RMSPROP_MOMENTUM = 0.5  # so that the momentum buffer travels too
    for k, v in kw.items():
        setattr(cfg, k, v)
    return NetworkVP(cfg, SHAPE, ACTIONS, torch.device('cpu'))


def batch(seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 256, (6, *SHAPE), generator=g, dtype=torch.uint8),
            torch.randint(0, ACTIONS, (6,), generator=g), torch.randn(6, generator=g))


META = make_meta('PongDeterministic-v0', SHAPE, ACTIONS, 'cnn')


def save(directory, episode, state=None, name='network'):
    state = state if state is not None else {'kind': 'cnn', 'model': {}, 'optimizers': [], 'version': 0}
    return save_checkpoint(str(directory), name, episode, state, {'episodes': episode, 'steps': 10 * episode},
                           {'ATARI_GAME': 'PongDeterministic-v0', 'SHAPE': (1, 2), 'X': np.float32(0.5)}, META)


def test_round_trip_keeps_predictions_and_optimizer_state(tmp_path):
    a = make_net(seed=0)
    for i in range(2):
        a.train(*batch(i), lr=1e-3, beta=0.01)
    path = save_checkpoint(str(tmp_path), 'network', 42, a.get_state(), {'episodes': 42, 'steps': 100, 'updates': 2},
                           dict(vars(Config)) | {'SEED': 0}, META)
    assert os.path.basename(path) == 'network_00000042.pt'
    ckpt = load_checkpoint(path)
    assert ckpt['episode'] == 42 and ckpt['counters']['updates'] == 2 and ckpt['meta']['network'] == 'cnn'
    check_compatible(ckpt, META)

    b = make_net(seed=7)
    x = batch(9)[0]
    assert not torch.equal(a.predict(x)[0], b.predict(x)[0])
    b.set_state(ckpt['network'])
    assert b.version == a.version == 2
    for pa, pb in zip(a.predict(x), b.predict(x), strict=True):
        assert torch.equal(pa, pb)
    # the optimizer state came along: one more identical step gives identical parameters
    a.train(*batch(5), lr=1e-3, beta=0.01)
    b.train(*batch(5), lr=1e-3, beta=0.01)
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert b.model.conv2.weight.is_contiguous(memory_format=torch.channels_last)


def test_settings_are_stored_weights_only_safe(tmp_path):
    path = save(tmp_path, 3)
    ckpt = torch.load(path, weights_only=True)
    assert ckpt['format'] == 'ga3c-checkpoint' and ckpt['format_version'] == 1
    assert ckpt['settings']['X'] == 0.5 and isinstance(ckpt['settings']['X'], float)
    assert tuple(ckpt['settings']['SHAPE']) == (1, 2)


def test_atomic_write_leaves_no_temp_file(tmp_path, monkeypatch):
    good = save(tmp_path, 1)
    assert os.listdir(tmp_path) == ['network_00000001.pt']

    def broken_save(obj, f):
        f.write(b'half a checkpoint')
        raise OSError('disk full')

    monkeypatch.setattr(Checkpoint.torch, 'save', broken_save)
    with pytest.raises(OSError):
        save(tmp_path, 1)
    assert os.listdir(tmp_path) == ['network_00000001.pt']  # the old checkpoint is intact, no temp file left
    monkeypatch.undo()
    assert load_checkpoint(good)['episode'] == 1


def test_find_latest_by_content_not_by_name(tmp_path):
    p3, p12 = save(tmp_path, 3), save(tmp_path, 12)
    # misleading names: the newest checkpoint gets the smallest number
    os.replace(p3, tmp_path / 'network_99999999.pt')
    os.replace(p12, tmp_path / 'network_00000001.pt')
    (tmp_path / '.network_abc.tmp').write_bytes(b'leftover of a crash')
    (tmp_path / 'notes.txt').write_text('not a checkpoint')
    assert find_checkpoint(str(tmp_path), 'network') == str(tmp_path / 'network_00000001.pt')
    assert find_checkpoint(str(tmp_path), 'network', episode=3) == str(tmp_path / 'network_99999999.pt')
    assert find_checkpoint(str(tmp_path), 'network', episode=12) == str(tmp_path / 'network_00000001.pt')
    with pytest.raises(CheckpointError, match=r'episode 7.*3, 12'):
        find_checkpoint(str(tmp_path), 'network', episode=7)


def test_find_ignores_other_names_and_skips_corrupt_files(tmp_path):
    save(tmp_path, 50, name='other')
    save(tmp_path, 5)
    (tmp_path / 'network_00000099.pt').write_bytes(b'PK\x03\x04 truncated')
    assert find_checkpoint(str(tmp_path), 'network') == str(tmp_path / 'network_00000005.pt')


def test_missing_or_empty_folder_gives_the_hint(tmp_path):
    for d in (tmp_path, tmp_path / 'nope'):
        with pytest.raises(CheckpointError, match=r"no checkpoint in '.*/': train first with ./_train.sh, or set "
                                                  r"CHECKPOINT_DIR"):
            find_checkpoint(str(d), 'network')


def test_truncated_file(tmp_path):
    path = save(tmp_path, 8)
    data = open(path, 'rb').read()
    with open(path, 'wb') as f:
        f.write(data[:len(data) // 2])
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    assert path in str(e.value) and 'truncated' in str(e.value) and '\n' not in str(e.value)


def test_text_file_and_foreign_torch_file(tmp_path):
    text = tmp_path / 'network_00000001.pt'
    text.write_text('hello\n')
    with pytest.raises(CheckpointError, match='not a readable checkpoint'):
        load_checkpoint(str(text))
    foreign = tmp_path / 'weights.pt'
    torch.save({'weight': torch.zeros(2)}, foreign)
    with pytest.raises(CheckpointError, match='not a ga3c checkpoint'):
        load_checkpoint(str(foreign))
    with pytest.raises(CheckpointError, match='does not exist'):
        load_checkpoint(str(tmp_path / 'missing.pt'))


def test_check_compatible_names_the_difference(tmp_path):
    ckpt = load_checkpoint(save(tmp_path, 2))
    check_compatible(ckpt, make_meta('PongDeterministic-v0', list(SHAPE), ACTIONS, 'cnn'))
    with pytest.raises(CheckpointError) as e:
        check_compatible(ckpt, make_meta('BreakoutDeterministic-v4', SHAPE, 6, 'cnn'))
    msg = str(e.value)
    assert "game 'PongDeterministic-v0' (this run: 'BreakoutDeterministic-v4')" in msg
    assert 'num_actions 4 (this run: 6)' in msg and 'state_shape' not in msg and 'network' in msg


def test_a_checkpoint_of_frames_first_states_still_loads(tmp_path):
    """Checkpoints made before image states were stored (H, W, frames) hold (frames, H, W) and no state_layout:
    the weights do not depend on that order, so such a checkpoint fits a run of the same images; another shape,
    or the same numbers marked as (H, W, frames), does not."""
    run = make_meta('PongDeterministic-v0', (20, 24, 2), ACTIONS, 'cnn')
    old = {k: v for k, v in run.items() if k != 'state_layout'} | {'state_shape': [2, 20, 24]}
    ckpt = load_checkpoint(save_checkpoint(str(tmp_path), 'network', 1, {'kind': 'cnn', 'model': {}}, {}, {}, old))
    assert 'state_layout' not in ckpt['meta']
    check_compatible(ckpt, run)
    with pytest.raises(CheckpointError, match=r'state_shape \(20, 24, 2\) \(this run: \(24, 20, 2\)\)'):
        check_compatible(ckpt, make_meta('PongDeterministic-v0', (24, 20, 2), ACTIONS, 'cnn'))
    marked = dict(run, state_shape=[2, 20, 24])
    ckpt = load_checkpoint(save_checkpoint(str(tmp_path), 'network', 2, {'kind': 'cnn', 'model': {}}, {}, {}, marked))
    with pytest.raises(CheckpointError, match='state_shape'):
        check_compatible(ckpt, run)


def test_set_state_refuses_another_network():
    a = make_net()
    mlp_cfg = Config()
    mlp = NetworkVP(mlp_cfg, (4,), ACTIONS, torch.device('cpu'))
    with pytest.raises(CheckpointError, match="'cnn' network"):
        mlp.set_state(a.get_state())
    other = NetworkVP(Config(), (40, 40, 2), ACTIONS, torch.device('cpu'))
    with pytest.raises(CheckpointError, match='does not fit'):
        other.set_state(a.get_state())
