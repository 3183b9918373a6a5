"""Weights as an RL trainer changes them, for the sparse-delta tests and benchmarks: fp32 master
weights stepped by Adam at RL learning rates (1e-6 to 1e-5) and cast to bf16 after each step, the
way a trainer publishes them. At those rates most Adam steps fall below bf16's rounding, so only
a small, scattered fraction of the bf16 elements changes per step (about 1 to 3 % in published RL
runs); every tensor changes somewhere. Also fixed densities: a given fraction of elements
changed at random positions.

numpy only (no torch), so the same data is made in CI and on a GPU machine; bf16 travels as its
uint16 bit patterns.

    python3 tests/sim/rl_weight_steps.py --elements 4000000 --steps 5 --lr 1e-6
"""

import argparse

import numpy as np


def to_bf16_bits(x):
    """fp32 -> bf16 bit patterns (uint16), rounding to nearest, ties to even, as torch's
    .to(torch.bfloat16) does; NaN stays a quiet NaN."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    out = ((bits + rounding) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = np.uint16(0x7FC0)
    return out


def from_bf16_bits(b):
    """bf16 bit patterns (uint16) -> fp32, exactly."""
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


class AdamTrainer:
    """fp32 master weights under Adam (betas 0.9, 0.999, eps 1e-8), one gradient per step drawn
    as a trainer's would look: zero-mean noise whose scale differs per tensor. `bf16()` is what
    the trainer publishes after each step."""

    def __init__(self, shapes, lr=1e-6, seed=0, weight_std=0.02, grad_std=1e-3):
        self.rng = np.random.default_rng(seed)
        self.lr = lr
        self.names = list(shapes)
        self.master = {n: self.rng.normal(0, weight_std, size=s).astype(np.float32)
                       for n, s in shapes.items()}
        self.m = {n: np.zeros_like(w) for n, w in self.master.items()}
        self.v = {n: np.zeros_like(w) for n, w in self.master.items()}
        self.grad_std = {n: grad_std * float(self.rng.uniform(0.5, 2.0)) for n in self.names}
        self.t = 0

    def step(self, b1=0.9, b2=0.999, eps=1e-8):
        self.t += 1
        for n in self.names:
            g = self.rng.normal(0, self.grad_std[n], size=self.master[n].shape).astype(np.float32)
            self.m[n] = b1 * self.m[n] + (1 - b1) * g
            self.v[n] = b2 * self.v[n] + (1 - b2) * g * g
            m_hat = self.m[n] / (1 - b1 ** self.t)
            v_hat = self.v[n] / (1 - b2 ** self.t)
            self.master[n] -= (self.lr * m_hat / (np.sqrt(v_hat) + eps)).astype(np.float32)

    def bf16(self):
        return {n: to_bf16_bits(w) for n, w in self.master.items()}


def changed_fraction(before, after):
    """The fraction of elements whose bits differ, over every tensor."""
    changed = sum(int(np.count_nonzero(before[n] != after[n])) for n in after)
    total = sum(after[n].size for n in after)
    return changed / total if total else 0.0


def with_density(bits, density, seed=0):
    """A copy of one bf16 tensor (uint16) with exactly round(density * size) elements changed,
    at random positions: each moved by one unit in the last place, as a small update moves it."""
    rng = np.random.default_rng(seed)
    out = np.array(bits, dtype=np.uint16, copy=True).reshape(-1)
    k = int(round(density * out.size))
    at = rng.choice(out.size, size=k, replace=False)
    # +1 ulp, or -1 where +1 would overflow the pattern; never the same bits.
    out[at] = np.where(out[at] == np.uint16(0xFFFF), out[at] - np.uint16(1),
                       out[at] + np.uint16(1))
    return out.reshape(np.shape(bits))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, default=4_000_000, help="per tensor")
    ap.add_argument("--tensors", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, nargs="+", default=[1e-6, 1e-5])
    args = ap.parse_args()
    shapes = {f"model.layers.{i}.weight": (args.elements,) for i in range(args.tensors)}
    print("#      lr  step  changed   per tensor")
    for lr in args.lr:
        trainer = AdamTrainer(shapes, lr=lr)
        before = trainer.bf16()
        for step in range(1, args.steps + 1):
            trainer.step()
            after = trainer.bf16()
            per = [float(np.count_nonzero(before[n] != after[n])) / after[n].size
                   for n in shapes]
            print(f"  {lr:7.0e}  {step:4d}  {changed_fraction(before, after) * 100:6.2f}%   "
                  + " ".join(f"{p * 100:.2f}%" for p in per))
            before = after


if __name__ == "__main__":
    main()
