"""Entry point: `python -m ga3c [--config FILE.toml] [KEY=VALUE ...]`, as the original's GA3C.py."""

from __future__ import annotations

import logging
import sys

from ga3c.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    # Imports stay inside: spawned agent processes import this module again (as the main module), and they
    # need none of it (about 2 MB each).
    from ga3c.settings import parse_settings

    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%H:%M:%S")
    try:
        cfg = parse_settings(sys.argv[1:] if argv is None else argv, auto=True)
        if cfg.PLAY_MODE:
            from ga3c.Player import Player

            return Player(cfg).run()
        from ga3c.Server import Server

        return Server(cfg).main()
    except ConfigError as exc:
        print(f"ga3c: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before the server handles signals (while torch is being imported)
        print("ga3c: interrupted before training started", file=sys.stderr)
        return 130
