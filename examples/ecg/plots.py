"""The run's pictures, as PNG files (matplotlib, no display needed).

- ``stream.png``: ten seconds of the stream around the highest-scoring held-out beat, with
  the beats found and the ones flagged as outliers (and the true abnormal ones, if known);
- ``beat_lengths.png``: the histogram of beat lengths with the pruning bounds;
- ``latent.png``: the held-out beats on the VAE's 2-D latent plane, outliers marked;
- ``decoded.png``: beats the decoder draws from a grid over the latent plane.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import outputs, vae


def write_all(result, out_dir, truth=None) -> list[Path]:
    """Write the four pictures into ``out_dir`` (made if missing), each replacing only a
    picture an earlier run wrote (``outputs``); returns their paths."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    outputs.check(out, outputs.PICTURES)
    abnormal = _true_abnormal(result, truth)
    paths = []
    for name, draw in zip(outputs.PICTURES, (_stream, _lengths, _latent, _decoded),
                          strict=True):
        fig = draw(plt, result, abnormal)
        try:
            paths.append(outputs.write(out, name, lambda path, fig=fig: fig.savefig(
                path, dpi=110, bbox_inches="tight")))
        finally:
            plt.close(fig)
    return paths


def _true_abnormal(result, truth):
    """Per detected beat: whether it matches a true abnormal beat (None without a truth)."""
    if truth is None:
        return None
    from .metrics import match

    for_detected, _ = match(result.beats.positions, truth.peaks, int(round(0.05 * result.rate)))
    out = np.zeros(len(result.beats), dtype=bool)
    ok = for_detected >= 0
    out[ok] = truth.abnormal[for_detected[ok]]
    return out


def _stream(plt, result, abnormal):
    start, values = result.excerpt
    t = (start + np.arange(len(values))) / result.rate
    fig, ax = plt.subplots(figsize=(12, 3.2))
    ax.plot(t, values, lw=0.8, color="0.2")
    pos = result.beats.positions
    inside = (pos >= start) & (pos < start + len(values))
    idx = np.flatnonzero(inside)
    ax.plot(pos[idx] / result.rate, values[pos[idx] - start], "o", ms=4, color="tab:blue",
            label="beat found")
    flagged = idx[result.flagged[idx]]
    ax.plot(pos[flagged] / result.rate, values[pos[flagged] - start], "o", ms=11, mfc="none",
            mew=1.6, color="tab:red", label="flagged outlier")
    if abnormal is not None:
        for i in idx[abnormal[idx]]:
            ax.axvspan(pos[i] / result.rate - 0.2, pos[i] / result.rate + 0.35, color="orange",
                       alpha=0.25, lw=0)
        ax.plot([], [], "s", color="orange", alpha=0.4, label="injected abnormal beat")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("ECG")
    ax.set_title("The stream, the beats found and the outliers flagged")
    ax.legend(loc="upper right", fontsize=8)
    return fig


def _lengths(plt, result, abnormal):
    p = result.params
    ms = result.beats.lengths[np.isfinite(result.beats.lengths)] / result.rate * 1000
    fig, ax = plt.subplots(figsize=(7, 3.5))
    hi = max(float(ms.max()) if len(ms) else 0, p.max_beat_seconds * 1000) * 1.05
    ax.hist(ms, bins=np.linspace(0, hi, 120), color="tab:blue")
    for bound in (p.min_beat_seconds, p.max_beat_seconds):
        ax.axvline(bound * 1000, ls="--", color="tab:red")
    ax.set_yscale("log")
    ax.set_xlabel("beat length, R-R (ms)")
    ax.set_ylabel("beats")
    pruned = int((~result.beats.kept).sum())
    ax.set_title(f"Beat lengths: {len(result.beats):,} beats, {pruned:,} pruned (red: bounds)")
    return fig


def _latent(plt, result, abnormal):
    test = result.test
    z = result.latent[test]
    fig, ax = plt.subplots(figsize=(6, 5.5))
    sc = ax.scatter(z[:, 0], z[:, 1], c=np.log10(result.scores[test]), s=6, cmap="viridis")
    fig.colorbar(sc, ax=ax, label="log10 score (negative ELBO)")
    flagged = result.flagged[test]
    ax.scatter(z[flagged, 0], z[flagged, 1], marker="x", s=40, color="tab:red",
               label=f"flagged ({int(flagged.sum())})")
    if abnormal is not None:
        a = abnormal[test]
        ax.scatter(z[a, 0], z[a, 1], s=70, facecolors="none", edgecolors="orange",
                   label=f"injected abnormal ({int(a.sum())})")
    ax.set_xlabel("z1")
    ax.set_ylabel("z2")
    ax.set_title("Held-out beats on the latent plane")
    ax.legend(loc="best", fontsize=8)
    return fig


def _decoded(plt, result, abnormal):
    points = 7
    z = result.latent[result.test]
    lo, hi = np.percentile(z, 0.5, axis=0), np.percentile(z, 99.5, axis=0)
    grid = vae.latent_grid(points, lo, hi)
    beats = vae.decode(result.model, grid)
    fig, axes = plt.subplots(points, points, figsize=(9, 7), sharex=True, sharey=True)
    for ax, beat in zip(axes.ravel(), beats, strict=True):
        ax.plot(beat, lw=0.8, color="tab:blue")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"Beats decoded from a grid over the latent plane: z1 from {lo[0]:.1f} to "
                 f"{hi[0]:.1f} (left to right), z2 from {hi[1]:.1f} to {lo[1]:.1f} (top down)")
    return fig
