"""The extension's icon (images/icon.png, 256x256): a rising bar chart over a chip outline.
Run with the repository's venv: .venv/bin/python editor-extension/scripts/make_icon.py"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

out = Path(__file__).resolve().parents[1] / "images" / "icon.png"
fig = plt.figure(figsize=(2.56, 2.56), dpi=100)
ax = fig.add_axes((0, 0, 1, 1))
ax.set_xlim(0, 1)
ax.set_ylim(0, 1)
ax.axis("off")
ax.add_patch(
    FancyBboxPatch(
        (0.06, 0.06),
        0.88,
        0.88,
        boxstyle="round,pad=0,rounding_size=0.16",
        facecolor="#1f2a44",
        edgecolor="none",
    )
)
for i in range(4):  # the chip's pins
    x = 0.27 + i * 0.153
    for y in (0.12, 0.83):
        ax.add_patch(
            FancyBboxPatch(
                (x - 0.02, y),
                0.04,
                0.05,
                boxstyle="round,pad=0,rounding_size=0.01",
                facecolor="#8fa3c8",
                edgecolor="none",
            )
        )
ax.add_patch(
    FancyBboxPatch(
        (0.2, 0.2),
        0.6,
        0.6,
        boxstyle="round,pad=0,rounding_size=0.06",
        facecolor="none",
        edgecolor="#8fa3c8",
        linewidth=3,
    )
)
for i, h in enumerate((0.14, 0.24, 0.36, 0.48)):  # speedup bars
    ax.add_patch(
        FancyBboxPatch(
            (0.28 + i * 0.115, 0.27),
            0.08,
            h,
            boxstyle="round,pad=0,rounding_size=0.015",
            facecolor="#ffb000" if i == 3 else "#4fc3f7",
            edgecolor="none",
        )
    )
fig.savefig(out, transparent=True)
print(out)
