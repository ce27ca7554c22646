"""scripts/plot_results.py on results files written here (as ProcessStats writes them), as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "plot_results.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def plot(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def results_text(episodes: int) -> str:
    """Results lines of a learning run: scores rising, several episodes per second, as the training writes them."""
    start = datetime(2026, 1, 2, 3, 4, 5)
    lines = []
    for i in range(episodes):
        when = start + timedelta(seconds=i // 3)
        score = 10 + i * 0.5 + (i % 7)
        lines.append(f"{when:%Y-%m-%d %H:%M:%S}, {score:g}, {20 + i}\n")
    return "".join(lines)


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert len(data) > 0 and data[:8] == PNG_SIGNATURE


@pytest.mark.parametrize("torn", ["2026-01-02 03:09:0", "2026-01-02 03:09:01, 17, 2"])
def test_plot_writes_png_and_ignores_blank_and_torn_last_lines(tmp_path, torn):
    """A file a training is still writing: a blank line, and a last line without its newline (which may even
    parse, cut inside its length) that must not be counted."""
    text = results_text(250)
    results = tmp_path / "results.txt"
    results.write_text(text[:200] + text[200:].replace("\n", "\n\n", 1) + torn)
    out = tmp_path / "out" / "curve.png"
    run = plot(results, "-o", out, "--window", 20, "--frameskip", 4, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "(250 episodes)" in run.stdout
    assert "skipped" not in run.stderr
    assert_png(out)


def test_plot_default_output_and_skipped_lines(tmp_path):
    results = tmp_path / "run.txt"
    results.write_text("not a results line\n" + results_text(5))
    run = plot(results, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "skipped 1 line" in run.stderr and "(5 episodes)" in run.stdout
    assert_png(tmp_path / "run.png")


def test_plot_missing_file_exits_2(tmp_path):
    run = plot(tmp_path / "nope.txt", "-o", tmp_path / "x.png", cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr.startswith("plot_results.py: error: results file") and "does not exist" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("content", ["", "\n\n", "2026-01-02 03:04:05, 1", "garbage\n"])
def test_plot_file_without_valid_line_exits_2(tmp_path, content):
    results = tmp_path / "results.txt"
    results.write_text(content)
    run = plot(results, "-o", tmp_path / "x.png", cwd=tmp_path)
    assert run.returncode == 2
    assert "has no valid line" in run.stderr and "Traceback" not in run.stderr


def test_plot_without_matplotlib_says_how_to_install(tmp_path):
    results = tmp_path / "results.txt"
    results.write_text(results_text(3))
    code = ("import runpy, sys; sys.modules['matplotlib'] = None; "
            f"sys.argv = ['plot_results.py', {str(results)!r}]; "
            f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "pip install ga3c[plot]" in run.stderr and "Traceback" not in run.stderr
