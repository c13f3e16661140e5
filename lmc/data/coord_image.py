"""An image to fit from its coordinates (a coordinate MLP / NeRF-style field), embedded: nothing
is read or downloaded, the picture is a closed-form function drawn on a fixed grid, so the data
never changes.

The picture is an RGBA "flower" of SIZE×SIZE pixels seen under VIEWS lightings:
- alpha (opacity, view-independent): a five-petal disc with a hole, soft-edged —
  a = s(40·(0.72 + 0.14·cos 5θ − ρ)) · s(40·(ρ − 0.18)), s the logistic, (ρ, θ) polar coordinates
  of the pixel centre (u, v) ∈ [−1, 1]²;
- colour: r = ½ + ½cos(3πu), g = ½ + ½sin(2πv + π/4), b = ½ + ½cos(4πρ) (stripes of several
  frequencies, so the Fourier features matter), times a view-dependent shading
  0.6 + 0.4·ρ·cos(θ − φ_k), light k from the angle φ_k = 2πk/VIEWS.

Each example is one pixel of one view: x = (u, v, w) float32, w = −1 + 2k/(VIEWS − 1) the view
coordinate (NeRF's viewing direction: it may change the colour, never the opacity); y = (a, r, g,
b) float32 in [0, 1] (nerf_mlp's (σ, rgb) outputs).  The validation split is 1/8 of the pixel
positions (drawn once from a fixed seed), held out in every view: the score is how well the fitted
field interpolates the image between the pixels it was trained on (MSE and PSNR, peak 1)."""
from __future__ import annotations

import numpy as np

from lmc.data.dataset import Dataset
from lmc.losses import FLOAT

SIZE = 48
VIEWS = 4
VAL_FRACTION = 8            # 1 in 8 pixel positions is held out
SEED = 7304


def _sig(z):
    return 1.0 / (1.0 + np.exp(-z))


def picture(size: int = SIZE, views: int = VIEWS) -> tuple[np.ndarray, np.ndarray]:
    """(coordinates [views, size, size, 3], RGBA targets [views, size, size, 4]), float64."""
    c = (np.arange(size) + 0.5) / size * 2.0 - 1.0
    v, u = np.meshgrid(c, c, indexing="ij")              # row = v (down), column = u (right)
    rho, theta = np.hypot(u, v), np.arctan2(v, u)
    alpha = _sig(40.0 * (0.72 + 0.14 * np.cos(5 * theta) - rho)) * _sig(40.0 * (rho - 0.18))
    base = np.stack([0.5 + 0.5 * np.cos(3 * np.pi * u), 0.5 + 0.5 * np.sin(2 * np.pi * v + np.pi / 4),
                     0.5 + 0.5 * np.cos(4 * np.pi * rho)], -1)
    xs, ys = [], []
    for k in range(views):
        w = -1.0 + 2.0 * k / (views - 1) if views > 1 else 0.0
        shade = 0.6 + 0.4 * rho * np.cos(theta - 2 * np.pi * k / views)
        xs.append(np.stack([u, v, np.full_like(u, w)], -1))
        ys.append(np.concatenate([alpha[..., None], base * shade[..., None]], -1))
    return np.stack(xs), np.clip(np.stack(ys), 0.0, 1.0)


def load() -> Dataset:
    x, y = picture()
    held = np.random.default_rng(SEED).permutation(SIZE * SIZE) < SIZE * SIZE // VAL_FRACTION
    held = np.broadcast_to(held.reshape(SIZE, SIZE), x.shape[:3])
    pick = lambda a, m: np.ascontiguousarray(a[m].astype(np.float32))
    src = "lmc.data.coord_image (embedded RGBA picture, pixel coordinates → colour)"
    return Dataset("image_coords", pick(x, ~held), pick(y, ~held), pick(x, held), pick(y, held), num_classes=1,
                   label_format=FLOAT, sources={a: src for a in ("x_train", "y_train", "x_val", "y_val")})
