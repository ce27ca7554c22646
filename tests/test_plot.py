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


def results_text(episodes: int, offset: float = 0.0) -> str:
    """Results lines of a learning run: scores rising, several episodes per second, as the training writes them."""
    start = datetime(2026, 1, 2, 3, 4, 5)
    lines = []
    for i in range(episodes):
        when = start + timedelta(seconds=i // 3)
        score = 10 + offset + i * 0.5 + (i % 7)
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


def naive_best_mean(scores: list[float], window: int) -> float:
    return max(sum(scores[max(0, i + 1 - window):i + 1]) / len(scores[max(0, i + 1 - window):i + 1])
               for i in range(len(scores)))


def test_plot_several_runs_prints_each_runs_figures(tmp_path):
    """Three seeds' files in one figure: each run's episodes, frames (sum of lengths x frameskip) and best rolling
    mean, computed here from the lines written, are what the script prints."""
    files, expected = [], []
    for seed, n in ((1, 250), (2, 120), (3, 40)):
        text = results_text(n, offset=-3.5 * seed)
        path = tmp_path / f"seed{seed}.txt"
        path.write_text(text)
        scores = [float(line.split(",")[1]) for line in text.splitlines()]
        frames = 4 * sum(int(line.split(",")[2]) for line in text.splitlines())
        files.append(path)
        expected.append((n, frames, naive_best_mean(scores, 30)))
    out = tmp_path / "seeds.png"
    run = plot(*files, "-o", out, "--window", 30, "--labels", "s1", "s2", "s3", "--target", 18, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "(3 runs)" in run.stdout
    for label, (n, frames, best) in zip(("s1", "s2", "s3"), expected, strict=True):
        frames_text = f"{frames / 1e3:.3g}k" if frames < 1e6 else f"{frames / 1e6:.3g}M"
        assert f"{label}: {n} episodes, {frames_text} frames, best mean of 30 {best:.2f}" in run.stdout, run.stdout
    assert_png(out)


@pytest.mark.parametrize("title, expected", [("Pong, 3 seeds", "Pong, 3 seeds"), (None, "results: 2 runs")])
def test_plot_several_runs_title_is_the_one_given(tmp_path, monkeypatch, title, expected):
    """A given --title is the figure's title as written (it was once suffixed with ": N runs"); without one the
    figure says how many runs it holds."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import plot_results
    finally:
        sys.path.remove(str(SCRIPT.parent))
    saved = []
    monkeypatch.setattr(plot_results, "_save", lambda fig, out: saved.append(fig._suptitle.get_text()))
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(results_text(12))
    args = [str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "-o", str(tmp_path / "x.png")]
    assert plot_results.main(args + (["--title", title] if title else [])) == 0
    assert saved == [expected]


@pytest.mark.parametrize("extra, message", [
    ((), "make one figure: name it with -o"),
    (("-o", "x.png", "--labels", "only-one"), "gives 1 label(s) for 2 results files"),
])
def test_plot_several_runs_bad_arguments_exit_2(tmp_path, extra, message):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(results_text(5))
    run = plot(tmp_path / "a.txt", tmp_path / "b.txt", *extra, cwd=tmp_path)
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr
    assert not list(tmp_path.glob("*.png"))
