"""Checkpoints: atomic writes, found by the episode stored inside them (the original parsed it back out of the file
name), loaded with `weights_only=True`, and checked against the run that loads them.

A checkpoint is `<CHECKPOINT_DIR>/<NETWORK_NAME>_<episode:08d>.pt`, a torch file holding a plain dict:
    format='ga3c-checkpoint', format_version=1, name, episode, counters, network, settings, meta
`meta` holds what must match to resume or play: game, state_shape, num_actions, network ('cnn'/'mlp', with
'-lstm' appended for NETWORK_TYPE='lstm'; see `make_meta`). Image states are (H, W, frames), marked
state_layout='HWC'; checkpoints made before that mark held (frames, H, W) states, and load as the same shape (the
weights do not depend on the order the states are stored in).
"""

from __future__ import annotations

import io
import logging
import os
import tempfile

import torch

from ga3c.errors import CheckpointError

log = logging.getLogger(__name__)

FORMAT = 'ga3c-checkpoint'
FORMAT_VERSION = 1
TMP_SUFFIX = '.tmp'
COMPAT_KEYS = ('game', 'state_shape', 'num_actions', 'network')


def make_meta(game: str, state_shape, num_actions: int, network: str) -> dict:
    """The `meta` dict that save_checkpoint stores and check_compatible compares."""
    meta = dict(game=str(game), state_shape=[int(s) for s in state_shape], num_actions=int(num_actions),
                network=str(network))
    if len(meta['state_shape']) == 3:
        meta['state_layout'] = 'HWC'
    return meta


def _stored_state_shape(stored: dict) -> tuple | None:
    """The stored state shape as (H, W, frames) for images, whichever layout the checkpoint was made with."""
    shape = stored.get('state_shape')
    if shape is None:
        return None
    shape = tuple(int(s) for s in shape)
    if len(shape) == 3 and 'state_layout' not in stored:  # made before image states were stored channels last
        shape = shape[1:] + shape[:1]
    return shape


def _plain(obj):
    """A copy made only of what `torch.load(weights_only=True)` accepts: dicts, lists, tuples, tensors, numbers,
    strings, None; other objects become their str()."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {(k if isinstance(k, (str, int)) else str(k)): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):  # torch.Size and named tuples included
        return [_plain(v) for v in obj] if isinstance(obj, list) else tuple(_plain(v) for v in obj)
    item = getattr(obj, 'item', None)  # numpy scalars
    if callable(item) and getattr(obj, 'shape', None) == ():
        return item()
    return str(obj)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    return line if len(line) <= 200 else line[:197] + '...'


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(directory: str, name: str, episode: int, network_state: dict, counters: dict, settings: dict,
                    meta: dict) -> str:
    """Writes `<directory>/<name>_<episode:08d>.pt` atomically; returns its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f'{name}_{int(episode):08d}.pt')
    content = dict(format=FORMAT, format_version=FORMAT_VERSION, name=str(name), episode=int(episode),
                   counters=_plain(counters), network=_plain(network_state), settings=_plain(settings),
                   meta=_plain(meta))
    # serialized in memory first: a failed write then raises the OSError that names it (e.g. "No space left on
    # device"), where torch's writer says only "unexpected pos"
    data = io.BytesIO()
    torch.save(content, data)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f'.{name}_', suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data.getbuffer())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)
    return path


def _read(path: str, mmap: bool) -> dict:
    if not os.path.exists(path):
        raise CheckpointError(f"checkpoint '{path}' does not exist")
    if os.path.isdir(path):
        raise CheckpointError(f"checkpoint '{path}' is a folder, not a file")
    try:
        ckpt = torch.load(path, map_location='cpu', weights_only=True, mmap=mmap)
    except Exception as e:  # truncated zip, text file, pickle refused by weights_only, ...
        raise CheckpointError(f"'{path}' is not a readable checkpoint (truncated, corrupt or not a torch file): "
                              f"{_first_line(e)}") from None
    if not isinstance(ckpt, dict) or ckpt.get('format') != FORMAT:
        raise CheckpointError(f"'{path}' is a torch file but not a ga3c checkpoint (no 'format': '{FORMAT}' marker)")
    version = ckpt.get('format_version')
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(f"'{path}' has checkpoint format version {version!r}; this ga3c reads up to "
                              f"{FORMAT_VERSION}: use a newer ga3c")
    missing = [k for k in ('episode', 'counters', 'network', 'settings', 'meta') if k not in ckpt]
    if missing:
        raise CheckpointError(f"'{path}' is an incomplete ga3c checkpoint: {', '.join(missing)} missing")
    ckpt['path'] = path
    return ckpt


def load_checkpoint(path: str) -> dict:
    """The checkpoint's dict (tensors on the CPU), with 'path' added; CheckpointError if it cannot be used."""
    return _read(path, mmap=False)


def find_checkpoint(directory: str, name: str, episode: int = 0) -> str:
    """The path of the checkpoint of `name` in `directory` with the highest episode stored inside it, or, with
    episode > 0, of the one holding that episode."""
    hint = f"no checkpoint in '{directory.rstrip('/')}/': train first with ./_train.sh, or set CHECKPOINT_DIR"
    if not os.path.isdir(directory):
        raise CheckpointError(hint)
    files = sorted(f for f in os.listdir(directory)
                   if not f.startswith('.') and not f.endswith(TMP_SUFFIX)
                   and os.path.isfile(os.path.join(directory, f)))
    found: list[tuple[int, float, str]] = []
    unreadable = []
    for f in files:
        path = os.path.join(directory, f)
        try:
            ckpt = _read(path, mmap=True)  # reads the small pickle, maps the tensors without reading them
        except CheckpointError as e:
            if f.endswith('.pt'):
                unreadable.append(f)
                log.warning("skipping %s", e)
            continue
        if ckpt.get('name') not in (None, name) or not isinstance(ckpt.get('episode'), int):
            continue
        found.append((ckpt['episode'], os.path.getmtime(path), path))
        del ckpt
    if not found:
        if unreadable:
            raise CheckpointError(f"no usable checkpoint of '{name}' in '{directory}': {', '.join(unreadable)} "
                                  f"could not be read (truncated or corrupt): train again with ./_train.sh, or set "
                                  f"CHECKPOINT_DIR")
        raise CheckpointError(hint)
    if episode > 0:
        matching = [c for c in found if c[0] == episode]
        if not matching:
            available = ', '.join(str(e) for e in sorted({c[0] for c in found}))
            raise CheckpointError(f"no checkpoint of episode {episode} in '{directory}' (episodes found: "
                                  f"{available}): set LOAD_EPISODE to one of them, or 0 for the latest")
        return max(matching)[2]
    return max(found)[2]


def check_compatible(ckpt: dict, meta: dict) -> None:
    """CheckpointError if the checkpoint was made for another game, state shape, action count or network kind."""
    stored = ckpt.get('meta') or {}
    diffs = []
    for key in COMPAT_KEYS:
        want, got = meta.get(key), stored.get(key)
        if key == 'state_shape':
            want = tuple(int(s) for s in want) if want is not None else None
            got = _stored_state_shape(stored)
        if want != got:
            diffs.append(f"{key} {got!r} (this run: {want!r})")
            if key == 'network' and str(got).endswith('-lstm') != str(want).endswith('-lstm'):
                diffs[-1] += f" [NETWORK_TYPE={'lstm' if str(got).endswith('-lstm') else 'feedforward'!r} builds it]"

    if diffs:
        where = ckpt.get('path', 'the checkpoint')
        raise CheckpointError(f"'{where}' was made for another run: {'; '.join(diffs)}: load a checkpoint of this "
                              f"game and network, or point CHECKPOINT_DIR elsewhere")
