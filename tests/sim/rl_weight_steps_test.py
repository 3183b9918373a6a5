"""The RL weight generator (rl_weight_steps.py): bf16 rounding as torch does it, exact fixed
densities, and Adam at RL learning rates changing a small fraction of bf16 elements per step."""

import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rl_weight_steps import (AdamTrainer, changed_fraction, from_bf16_bits,  # noqa: E402
                             to_bf16_bits, with_density)


class Bf16Test(unittest.TestCase):
    def test_rounds_to_nearest_with_ties_to_even(self):
        ulp = 2.0 ** -7  # bf16's spacing in [1, 2)
        cases = {
            1.0: 0x3F80,
            1.0 + ulp / 2: 0x3F80,           # a tie: to the even pattern below
            1.0 + 3 * ulp / 2: 0x3F82,       # a tie: to the even pattern above
            1.0 + ulp / 2 + 2 ** -20: 0x3F81,  # past the tie: up
            -2.0: 0xC000,
            0.0: 0x0000,
            float("inf"): 0x7F80,
        }
        for value, bits in cases.items():
            got = int(to_bf16_bits(np.array([value], dtype=np.float32))[0])
            self.assertEqual(got, bits, f"{value!r}: {got:#06x} != {bits:#06x}")
        self.assertEqual(int(to_bf16_bits(np.array([np.nan], dtype=np.float32))[0]), 0x7FC0)

    def test_every_bf16_value_goes_back_and_forth_exactly(self):
        patterns = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16)
        finite = patterns[(patterns & 0x7F80) != 0x7F80]  # not inf or NaN
        self.assertTrue(np.array_equal(to_bf16_bits(from_bf16_bits(finite)), finite))


class DensityTest(unittest.TestCase):
    def test_exactly_the_fraction_asked_changes(self):
        base = to_bf16_bits(np.random.default_rng(1).normal(0, 0.02, 100_000).astype(np.float32))
        for density in (0.001, 0.01, 0.1, 0.5, 1.0):
            changed = with_density(base, density, seed=3)
            self.assertEqual(int(np.count_nonzero(changed != base)), round(density * base.size))
            self.assertEqual(changed.dtype, np.uint16)


class AdamTest(unittest.TestCase):
    def test_rl_learning_rates_change_few_elements_and_every_tensor(self):
        shapes = {f"t{i}": (50_000,) for i in range(3)}
        trainer = AdamTrainer(shapes, lr=1e-6, seed=5)
        before = trainer.bf16()
        fractions = []
        for _ in range(4):
            trainer.step()
            after = trainer.bf16()
            fractions.append(changed_fraction(before, after))
            for n in shapes:
                self.assertGreater(int(np.count_nonzero(before[n] != after[n])), 0, n)
            before = after
        # A few percent at most, and never nothing.
        self.assertTrue(all(0.002 < f < 0.06 for f in fractions), fractions)
        # The same seed makes the same weights.
        again = AdamTrainer(shapes, lr=1e-6, seed=5)
        for _ in range(4):
            again.step()
        self.assertEqual(changed_fraction(after, again.bf16()), 0.0)


if __name__ == "__main__":
    unittest.main()
