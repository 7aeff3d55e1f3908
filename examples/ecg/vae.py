"""A small convolutional VAE with a 2-D latent space: normal beats are what it learns to draw.

Trained on most beats of a recording (mostly normal ones), it reconstructs normal beats well
and abnormal ones badly or only from codes far from the prior, so the negative ELBO
(reconstruction error plus KL term) is an outlier score that needs no labels; the 2-D latent
mean is a map of the beats that can be plotted. The beats arrive as CuPy or NumPy arrays and
enter PyTorch by DLPack, without a copy.

On a GPU a training step of a model this small is a few hundred short kernels, each launched
by the host. So after a few ordinary steps the whole step (the batch's gather, forward,
backward and Adam's update) is captured once as a CUDA graph and replayed, one launch a step.
Where PyTorch refuses the capture, the steps stay ordinary ones.

The trained model travels between processes as a dict of plain NumPy arrays: distributed by
itself has no serializer for a CUDA ``torch.Tensor``, and NumPy arrays unpickle everywhere,
also on a client without a GPU.
"""

from __future__ import annotations

import functools

import numpy as np

from .backend import Backend
from .handoff import to_torch
from .params import EMBED_SIZE, Params

LATENT = 2


def check_installed() -> None:
    """The model is PyTorch's: say how to install it before any work, not in a worker."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise ImportError("the ECG example trains its model with PyTorch: pip install "
                          "'dask-gpu-interop[ecg]' (on a machine without a GPU, PyTorch's CPU "
                          "build first: pip install torch --index-url "
                          "https://download.pytorch.org/whl/cpu)")


CHANNELS = (8, 16)  # convolution widths
HIDDEN = 64
SCORE_BATCH = 8192
WARMUP_STEPS = 3  # ordinary steps before a step is captured (PyTorch's recipe asks for some)


@functools.cache
def _model_class():
    import torch
    from torch import nn

    class BeatVAE(nn.Module):
        """256 samples -> 4 strided convolutions -> 2-D Gaussian -> 4 transposed ones -> 256."""

        def __init__(self):
            super().__init__()
            c1, c2 = CHANNELS
            flat = c2 * (EMBED_SIZE // 16)
            self.encoder = nn.Sequential(
                nn.Conv1d(1, c1, 9, stride=2, padding=4), nn.ReLU(),
                nn.Conv1d(c1, c2, 9, stride=2, padding=4), nn.ReLU(),
                nn.Conv1d(c2, c2, 9, stride=2, padding=4), nn.ReLU(),
                nn.Conv1d(c2, c2, 9, stride=2, padding=4), nn.ReLU(),
                nn.Flatten(), nn.Linear(flat, HIDDEN), nn.ReLU(),
            )
            self.mu = nn.Linear(HIDDEN, LATENT)
            self.logvar = nn.Linear(HIDDEN, LATENT)
            self.decoder = nn.Sequential(
                nn.Linear(LATENT, HIDDEN), nn.ReLU(),
                nn.Linear(HIDDEN, flat), nn.ReLU(),
                nn.Unflatten(1, (c2, EMBED_SIZE // 16)),
                nn.ConvTranspose1d(c2, c2, 4, stride=2, padding=1), nn.ReLU(),
                nn.ConvTranspose1d(c2, c2, 4, stride=2, padding=1), nn.ReLU(),
                nn.ConvTranspose1d(c2, c1, 4, stride=2, padding=1), nn.ReLU(),
                nn.ConvTranspose1d(c1, 1, 4, stride=2, padding=1),
            )

        def encode(self, x):
            h = self.encoder(x.unsqueeze(1))
            return self.mu(h), self.logvar(h).clamp(-10, 10)

        def decode(self, z):
            return self.decoder(z).squeeze(1)

        def forward(self, x, generator=None):
            mu, logvar = self.encode(x)
            noise = torch.randn(mu.shape, generator=generator, device=mu.device, dtype=mu.dtype)
            z = mu + noise * torch.exp(0.5 * logvar)
            return self.decode(z), mu, logvar

    return BeatVAE


def _torch_device(backend: Backend):
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if backend.is_gpu else torch.device("cpu")


def _as_tensor(beats, backend: Backend):
    """The beats as a float32 tensor on their own device: DLPack, no copy."""
    xp = backend.xp
    beats = xp.ascontiguousarray(beats, dtype=xp.float32)
    if beats.ndim != 2 or beats.shape[1] != EMBED_SIZE:
        raise ValueError(f"expected beats of shape (n, {EMBED_SIZE}), got {beats.shape}")
    return to_torch(beats)


def train(beats, params: Params, device: str, threads: int | None = None,
          graphed: bool | None = None) -> dict:
    """Fit the VAE to ``beats`` ((n, 256) CuPy/NumPy); returns the model state as NumPy.

    The state holds the weights, the input scale (the beats' standard deviation, so the
    network sees unit-scale inputs whatever the recording's units), the loss history and
    whether the steps ran as a CUDA graph. ``threads``: PyTorch's CPU threads while training
    (default: as they are). ``graphed``: replay each step as a CUDA graph (default: on GPUs,
    where capture is possible); False keeps ordinary steps.
    """
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _train(beats, params, device, graphed)
    finally:
        torch.set_num_threads(before)


class _Steps:
    """The training steps of one model: ``run(order, k)`` takes the batch of rows
    ``order[k * batch:(k + 1) * batch]`` and adds its loss to ``epoch_loss``. Graphed, the
    first WARMUP_STEPS are ordinary ones on a side stream, as PyTorch's capture recipe asks;
    the next is captured and every step from then on replays it. The noise of a graphed
    step comes from the device's default generator (which capture supports), seeded too."""

    def __init__(self, model, x, scale: float, batch: int, params: Params, generator,
                 graphed: bool):
        import torch

        self.torch, self.model, self.x, self.scale = torch, model, x, scale
        self.kl_weight, self.seeded = params.kl_weight, generator
        self.optimizer = Adam(model.parameters(), lr=params.learning_rate)
        self.graphed, self.graph, self.done = graphed, None, 0
        self.generator = None if graphed else generator
        self.rows = torch.zeros(batch, dtype=torch.int64, device=x.device)
        self.epoch_loss = torch.zeros((), device=x.device)

    def step(self) -> None:
        xb = self.x[self.rows] / self.scale
        recon, mu, logvar = self.model(xb, self.generator)
        loss = _loss(recon, xb, mu, logvar, self.kl_weight).mean()
        loss.backward()
        self.optimizer.step()
        self.epoch_loss += loss.detach()  # no sync with the GPU per step

    def run(self, order, k: int) -> None:
        torch = self.torch
        batch = self.rows.shape[0]
        self.rows.copy_(order[k * batch:(k + 1) * batch])
        if self.graphed and self.graph is None and self.done >= WARMUP_STEPS:
            self._capture()
        self.done += 1
        if self.graph is not None:
            self.graph.replay()
            return
        self.optimizer.zero_grad()
        if not self.graphed:
            self.step()
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.step()
        torch.cuda.current_stream().wait_stream(side)

    def _capture(self) -> None:
        """Record one step (without running it) as a CUDA graph; where PyTorch refuses, go on
        with ordinary steps."""
        torch = self.torch
        stream = torch.cuda.current_stream()
        self.optimizer.zero_grad()  # the captured backward writes the grads
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self.step()
        except RuntimeError:
            torch.cuda.set_stream(stream)  # in case the refused capture left its stream current
            self.graphed, self.generator = False, self.seeded
            return
        self.graph = graph


class Adam:
    """Adam (Kingma and Ba), the update ``torch.optim.Adam`` makes with its defaults, in
    PyTorch's multi-tensor ops. ``torch.optim``'s optimizers import ``torch._dynamo`` the first
    time they run, which takes seconds in a new process: longer than this model's whole
    training on a GPU. The step count is a tensor on the parameters' device, so a step
    captured in a CUDA graph corrects the bias of every replay by its own count."""

    def __init__(self, parameters, lr: float, betas=(0.9, 0.999), eps: float = 1e-8):
        import torch

        self.torch = torch
        self.params = [p for p in parameters if p.requires_grad]
        self.lr, (self.beta1, self.beta2), self.eps = lr, betas, eps
        self.mean = [torch.zeros_like(p) for p in self.params]
        self.square = [torch.zeros_like(p) for p in self.params]
        self.count = torch.zeros((), device=self.params[0].device)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        torch = self.torch
        with torch.no_grad():
            grads = [p.grad for p in self.params]
            self.count += 1
            torch._foreach_lerp_(self.mean, grads, 1 - self.beta1)
            torch._foreach_mul_(self.square, self.beta2)
            torch._foreach_addcmul_(self.square, grads, grads, value=1 - self.beta2)
            step_size = self.lr / (1 - self.beta1 ** self.count)
            denominator = torch._foreach_sqrt(self.square)
            torch._foreach_div_(denominator, (1 - self.beta2 ** self.count).sqrt())
            torch._foreach_add_(denominator, self.eps)
            update = torch._foreach_div(self.mean, denominator)
            torch._foreach_mul_(update, step_size)
            torch._foreach_sub_(self.params, update)


def _train(beats, params: Params, device: str, graphed: bool | None = None) -> dict:
    import torch

    backend = Backend(device)
    x = _as_tensor(beats, backend)
    n = x.shape[0]
    if n < 2:
        raise ValueError(f"the VAE needs at least 2 training beats, got {n}")
    torch.manual_seed(params.seed)
    generator = torch.Generator(device=x.device).manual_seed(params.seed)
    model = _model_class()().to(x.device)
    scale = float(x.std()) or 1.0
    batch = min(params.batch_size, n)
    per_epoch = max(1, n // batch)
    steps = min(params.epochs * per_epoch, params.max_steps)
    if graphed is None:
        graphed = steps > 2 * WARMUP_STEPS
    runner = _Steps(model, x, scale, batch, params, generator, graphed and x.is_cuda)
    history = []
    model.train()
    step = 0
    while step < steps:
        order = torch.randperm(n, generator=generator, device=x.device)
        runner.epoch_loss.zero_()
        for k in range(per_epoch):
            if step >= steps:
                break
            runner.run(order, k)
            step += 1
        history.append(float(runner.epoch_loss) / per_epoch)
    state = {name: t.detach().cpu().numpy() for name, t in model.state_dict().items()}
    return {"weights": state, "scale": scale, "kl_weight": params.kl_weight,
            "history": history, "steps": steps, "train_beats": n,
            "graphed": runner.graph is not None}


def _loss(recon, x, mu, logvar, kl_weight):
    squared = ((recon - x) ** 2).sum(dim=1)
    kl = -0.5 * (1 + logvar - mu**2 - logvar.exp()).sum(dim=1)
    return squared + kl_weight * kl


def load(state: dict, device: str):
    """The model of ``state`` on ``device``'s torch device, in eval mode."""
    import torch

    model = _model_class()()
    weights = state["weights"]
    model.load_state_dict({name: torch.from_numpy(np.asarray(a)) for name, a in weights.items()})
    return model.to(_torch_device(Backend(device))).eval()


def score(beats, state: dict, device: str) -> tuple[np.ndarray, np.ndarray]:
    """Per beat: the negative ELBO at the latent mean (reconstruction error plus the KL term,
    the loss the model was trained on), and that mean, as NumPy (3 numbers a beat).

    The KL term matters: a kind of beat common enough to get its own corner of the latent
    plane is reconstructed well there, but that corner is far from the prior's bulk.
    """
    import torch

    backend = Backend(device)
    x = _as_tensor(beats, backend)
    model = load(state, device)
    scale = state["scale"]
    scores, latent = [], []
    with torch.no_grad():
        for lo in range(0, x.shape[0], SCORE_BATCH):
            xb = x[lo:lo + SCORE_BATCH] / scale
            mu, logvar = model.encode(xb)
            recon = model.decode(mu)
            scores.append(_loss(recon, xb, mu, logvar, state["kl_weight"]).cpu())
            latent.append(mu.cpu())
    if not scores:
        return np.empty(0, np.float32), np.empty((0, LATENT), np.float32)
    return torch.cat(scores).numpy(), torch.cat(latent).numpy()


WARM_UP_BEATS = 64


def warm_up(device: str) -> None:
    """The scoring's forward pass once, on a few beats of zeros through an untrained model:
    PyTorch loads the kernels of :func:`score` and, on a GPU, makes its library handles."""
    import torch

    with torch.random.fork_rng(devices=[]):  # the seed's draws stay as they were
        model = _model_class()().to(_torch_device(Backend(device)))
    x = torch.zeros((WARM_UP_BEATS, EMBED_SIZE), device=next(model.parameters()).device)
    with torch.no_grad():
        mu, logvar = model.encode(x)
        _loss(model.decode(mu), x, mu, logvar, 1.0).cpu()


def decode(state: dict, z) -> np.ndarray:
    """Beats drawn from latent points ``z`` ((m, 2)), in the embeddings' units, on the CPU."""
    import torch

    model = load(state, "cpu")
    with torch.no_grad():
        out = model.decode(torch.as_tensor(np.asarray(z, dtype=np.float32)))
    return out.numpy() * state["scale"]


def latent_grid(points: int, lo, hi) -> np.ndarray:
    """A ``points`` x ``points`` grid over the box ``lo``-``hi`` (2 numbers each), row by row
    from the top (high z2) down, for drawing decoded beats."""
    zx = np.linspace(lo[0], hi[0], points, dtype=np.float32)
    zy = np.linspace(hi[1], lo[1], points, dtype=np.float32)
    gx, gy = np.meshgrid(zx, zy)
    return np.stack([gx.ravel(), gy.ravel()], axis=1)
