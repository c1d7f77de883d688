#!/usr/bin/env python3
"""Writes tests/data/golden/scaler_policies.json: loss-scale trajectories of the four scale rules
(scaler.policy: pytorch | deepspeed | megatron | fairseq) over injected overflow patterns, every
step's scale and tracker state, for tests/unit/amp/test_scale_policies.cpp (CPU) and the CLI test
to compare with bit for bit.

Each rule below is restated from its upstream update function (read from the source, not
imported; plain Python, no PyTorch needed):
  * pytorch   torch.amp.GradScaler / _amp_update_scale_ (>= 2.1), with ampctl's hysteresis,
              min_scale and max_scale extensions (docs/reference.md, "Scaler");
  * deepspeed deepspeedai/DeepSpeed deepspeed/runtime/fp16/loss_scaler.py,
              DynamicLossScaler.update_scale;
  * megatron  NVIDIA/Megatron-LM megatron/core/optimizer/grad_scaler.py, DynamicGradScaler.update;
  * fairseq   facebookresearch/fairseq fairseq/optim/dynamic_loss_scaler.py, DynamicLossScaler
              .update (a clean step) and .check_overflow (an overflowing one).

Numerics, precisely. Every rule runs twice over each pattern:
  * "upstream": the upstream arithmetic. DeepSpeed's cur_scale and fairseq's loss_scale are
    Python floats (float64): the scale is multiplied / divided by scale_factor in float64 and
    never rounded to float32, and nothing stops it growing past float32's maximum (the loss is
    then scaled by a float32 inf). Megatron's _scale, growth_factor, backoff_factor and min_scale
    are float32 CUDA tensors: each product is the float32-rounded product of two float32s, and a
    growth past float32's maximum gives inf. PyTorch's _amp_update_scale_ multiplies the float32
    scale by a double factor in double and rounds once, and drops a non-finite growth.
  * "ampctl": what lib/include/ampctl/math/amp_math.h does, which the golden file records. The
    scale is a float32 (the value that multiplies the loss is a float32 in every framework); each
    product is formed in double from the float32 scale and rounded to float32 once (Megatron: the
    factors are rounded to float32 first, so its products are bitwise upstream's); a growth whose
    float32 result is not finite leaves the scale unchanged (PyTorch's rule, applied to all); a
    backoff multiplies by backoff_factor where DeepSpeed and fairseq divide by their single
    scale_factor (the same bits for 2 and 0.5); Megatron's hysteresis counter stops at 0 (its own
    goes below 0; the backoffs are the same). For DeepSpeed and fairseq ampctl also keeps a
    growth_tracker (clean steps since the last overflow or growth) for its metrics line; upstream
    has none.
With power-of-two factors and the scale inside float32's range the two agree bit for bit; the
file records, per case, the first step where they differ (null when they never do), so a reader
sees exactly what the float32 choice changes.

The DeepSpeed and fairseq stops at their minimum (raise_error_at_min_scale, min_loss_scale) are
scaler.on_min_scale's business, not the rule's: here the scale stays at its floor.

Run: python3 scripts/golden/scaler_policies.py  (the output is checked in).
"""
import json
import math
import os
import struct

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "golden",
                   "scaler_policies.json")

# Values at or above this round to inf in float32 (float32 max plus half an ulp; the tie rounds
# to even, which is inf because float32 max has an odd significand).
F32_OVERFLOW = 2.0**128 - 2.0**103


def f32(x):
    """x rounded to the nearest float32 (ties to even), as a Python float."""
    if math.isnan(x):
        return x
    if abs(x) >= F32_OVERFLOW:
        return math.copysign(math.inf, x)
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


class Numerics:
    """How a rule multiplies its scale: `upstream` or `ampctl` (module docstring)."""

    def __init__(self, ampctl, float32_tensors=False):
        self.ampctl = ampctl
        self.float32_tensors = float32_tensors  # Megatron: the factors are float32 tensors

    def factor(self, x):
        return f32(x) if self.float32_tensors else x

    def grow(self, scale, factor):
        g = scale * self.factor(factor)
        if self.ampctl or self.float32_tensors:
            g = f32(g)
        if self.ampctl and not math.isfinite(g):
            return scale
        return g

    def back_off(self, scale, factor, floor, upstream_divisor=None):
        """upstream_divisor: DeepSpeed and fairseq divide by their one scale_factor (the growth
        factor) where ampctl multiplies by backoff_factor."""
        if not self.ampctl and upstream_divisor is not None:
            return max(scale / upstream_divisor, floor)
        b = scale * self.factor(factor)
        if self.ampctl or self.float32_tensors:
            b = f32(b)
        return max(b, floor)


# ---- the rules ----


class PyTorch:
    """_amp_update_scale_ (factors are doubles, one rounding) + ampctl's extensions."""

    def __init__(self, p, num):
        self.p, self.num = p, num
        self.scale = f32(p["init_scale"])
        self.growth_tracker = 0
        self.hysteresis_tracker = p["hysteresis"]

    def update(self, found):
        p = self.p
        if found:
            self.growth_tracker = 0
            self.hysteresis_tracker = max(self.hysteresis_tracker - 1, 0)
            if self.hysteresis_tracker <= 0:
                self.scale = max(f32(self.scale * p["backoff_factor"]), f32(p["min_scale"]))
        else:
            successful = self.growth_tracker + 1
            if successful == p["growth_interval"]:
                grown = f32(self.scale * p["growth_factor"])
                if math.isfinite(grown):
                    grown = min(grown, f32(p["max_scale"]))
                    if grown > self.scale:
                        self.scale = grown
                self.growth_tracker = 0
                self.hysteresis_tracker = p["hysteresis"]
            else:
                self.growth_tracker = successful

    def state(self):
        return {"growth_tracker": self.growth_tracker,
                "hysteresis_tracker": self.hysteresis_tracker}


class Megatron:
    """DynamicGradScaler.update."""

    def __init__(self, p, num):
        self.p, self.num = p, num
        self.scale = f32(p["init_scale"])  # torch.tensor([initial_scale], dtype=torch.float)
        self.min_scale = f32(p["min_scale"])
        self._growth_tracker = 0
        self._hysteresis_tracker = p["hysteresis"]

    def update(self, found_inf):
        p = self.p
        if found_inf:
            self._growth_tracker = 0
            self._hysteresis_tracker -= 1
            if self.num.ampctl:
                self._hysteresis_tracker = max(self._hysteresis_tracker, 0)
            if self._hysteresis_tracker <= 0:
                self.scale = self.num.back_off(self.scale, p["backoff_factor"], self.min_scale)
        else:
            self._growth_tracker += 1
            if self._growth_tracker == p["growth_interval"]:
                self._growth_tracker = 0
                self._hysteresis_tracker = p["hysteresis"]
                self.scale = self.num.grow(self.scale, p["growth_factor"])

    def state(self):
        return {"growth_tracker": self._growth_tracker,
                "hysteresis_tracker": self._hysteresis_tracker}


class DeepSpeed:
    """DynamicLossScaler.update_scale (delayed_shift = hysteresis, scale_window =
    growth_interval, min_scale; raise_error_at_min_scale is on_min_scale's, see above)."""

    def __init__(self, p, num):
        self.p, self.num = p, num
        self.cur_scale = f32(p["init_scale"]) if num.ampctl else p["init_scale"]
        self.cur_iter = 0
        self.last_overflow_iter = -1
        self.scale_window = p["growth_interval"]
        self.min_scale = p["min_scale"]
        self.delayed_shift = p["hysteresis"]
        self.cur_hysteresis = p["hysteresis"]
        self.consecutive_hysteresis = p["consecutive_hysteresis"]
        self.growth_tracker = 0  # ampctl's, for its metrics line

    @property
    def scale(self):
        return self.cur_scale

    def update(self, overflow):
        p = self.p
        if overflow:
            if self.delayed_shift == 1 or self.cur_hysteresis == 1:
                self.cur_scale = self.num.back_off(self.cur_scale, p["backoff_factor"],
                                                   self.min_scale, p["growth_factor"])
            else:
                self.cur_hysteresis -= 1
            self.last_overflow_iter = self.cur_iter
            self.growth_tracker = 0
        else:
            if self.consecutive_hysteresis:
                self.cur_hysteresis = self.delayed_shift
            stable_interval = (self.cur_iter - self.last_overflow_iter) - 1
            if (stable_interval > 0) and (stable_interval % self.scale_window == 0):
                if not self.consecutive_hysteresis:
                    self.cur_hysteresis = self.delayed_shift
                self.cur_scale = self.num.grow(self.cur_scale, p["growth_factor"])
                self.growth_tracker = 0
            else:
                self.growth_tracker += 1
        self.cur_iter += 1

    def state(self):
        return {"growth_tracker": self.growth_tracker, "hysteresis_tracker": self.cur_hysteresis,
                "iter": self.cur_iter, "last_overflow_iter": self.last_overflow_iter}


class Fairseq:
    """DynamicLossScaler: update() after a clean step, check_overflow() on an overflowing one
    (threshold = min_scale, the floor; min_loss_scale's stop is on_min_scale's)."""

    def __init__(self, p, num):
        self.p, self.num = p, num
        self.loss_scale = f32(p["init_scale"]) if num.ampctl else p["init_scale"]
        self.scale_window = p["growth_interval"]
        self.tolerance = p["tolerance"]
        self.threshold = p["min_scale"]
        self._iter = 0
        self._last_overflow_iter = -1
        self._last_rescale_iter = -1
        self._overflows_since_rescale = 0
        self.growth_tracker = 0  # ampctl's, for its metrics line

    @property
    def scale(self):
        return self.loss_scale

    def update(self, overflow):
        p = self.p
        if not overflow:  # update()
            if (self._iter - self._last_overflow_iter) % self.scale_window == 0:
                self.loss_scale = self.num.grow(self.loss_scale, p["growth_factor"])
                self._last_rescale_iter = self._iter
                self.growth_tracker = 0
            else:
                self.growth_tracker += 1
            self._iter += 1
            return
        # check_overflow(overflow=True)
        iter_since_rescale = self._iter - self._last_rescale_iter
        if iter_since_rescale == 0:
            iter_since_rescale = 1000
        self._last_overflow_iter = self._iter
        self._overflows_since_rescale += 1
        pct_overflow = self._overflows_since_rescale / float(iter_since_rescale)
        if pct_overflow >= self.tolerance:
            # _decrease_loss_scale: /= scale_factor, then max(., threshold)
            self.loss_scale = self.num.back_off(self.loss_scale, p["backoff_factor"],
                                                self.threshold, p["growth_factor"])
            self._last_rescale_iter = self._iter
            self._overflows_since_rescale = 0
        self.growth_tracker = 0
        self._iter += 1

    def state(self):
        return {"growth_tracker": self.growth_tracker, "iter": self._iter,
                "last_overflow_iter": self._last_overflow_iter,
                "last_rescale_iter": self._last_rescale_iter,
                "overflows_since_rescale": self._overflows_since_rescale}


RULES = {"pytorch": PyTorch, "deepspeed": DeepSpeed, "megatron": Megatron, "fairseq": Fairseq}

DEFAULTS = {"init_scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
            "growth_interval": 2000, "hysteresis": 1, "min_scale": 0.0, "max_scale": math.inf,
            "consecutive_hysteresis": False, "tolerance": 0.0}


def pattern(*runs):
    """runs of (found, count) -> a list of 0/1."""
    out = []
    for found, count in runs:
        out += [1 if found else 0] * count
    return out


def case(name, policy, params, overflow):
    p = dict(DEFAULTS)
    p.update(params)
    ours = RULES[policy](p, Numerics(ampctl=True, float32_tensors=policy == "megatron"))
    upstream = RULES[policy](p, Numerics(ampctl=False, float32_tensors=policy == "megatron"))
    steps, first_difference = [], None
    for i, found in enumerate(overflow):
        ours.update(found)
        upstream.update(found)
        row = {"found_inf": found, "scale": ours.scale, "scale_bits": f32_bits(ours.scale)}
        row.update(ours.state())
        up = upstream.scale
        row["upstream_scale"] = up if math.isfinite(up) else repr(up)
        if first_difference is None and (up != ours.scale or upstream.state() != ours.state()):
            first_difference = i
        steps.append(row)
    # Only the keys the rule uses: the others stay at their defaults, as the config requires.
    used = {"pytorch": {"hysteresis", "min_scale", "max_scale"},
            "deepspeed": {"hysteresis", "consecutive_hysteresis", "min_scale"},
            "megatron": {"hysteresis", "min_scale"},
            "fairseq": {"tolerance", "min_scale"}}[policy]
    for k in params:
        assert k in used or k in ("init_scale", "growth_factor", "backoff_factor",
                                  "growth_interval"), (name, k)
    shown = {k: (v if not (isinstance(v, float) and math.isinf(v)) else ".inf")
             for k, v in p.items()}
    return {"name": name, "policy": policy, "params": shown, "steps": steps,
            "first_upstream_difference": first_difference}


def cases():
    out = []
    runs = pattern((0, 5), (1, 3), (0, 9), (1, 1), (0, 13), (1, 2), (0, 8), (1, 4), (0, 6))
    sparse = pattern((0, 3), (1, 1), (0, 6), (1, 1), (0, 6), (1, 1), (0, 10), (1, 1), (0, 9))
    clean = pattern((0, 12), (1, 1), (0, 12))
    floor = pattern((0, 2), (1, 12), (0, 7), (1, 3), (0, 6))
    hyst = pattern((0, 5), (1, 1), (0, 2), (1, 1), (0, 1), (1, 2), (0, 9), (1, 1), (0, 1), (1, 1),
                   (0, 6), (1, 3), (0, 8))

    # pytorch: today's rule and its extensions.
    out.append(case("pytorch_runs", "pytorch", {"growth_interval": 4}, runs))
    out.append(case("pytorch_hysteresis_min_max", "pytorch",
                    {"growth_interval": 3, "hysteresis": 2, "min_scale": 4096.0,
                     "max_scale": 131072.0}, hyst))
    out.append(case("pytorch_odd_factors", "pytorch",
                    {"init_scale": 1234.5, "growth_factor": 1.7, "backoff_factor": 0.3,
                     "growth_interval": 2}, sparse))
    out.append(case("pytorch_near_f32_max", "pytorch",
                    {"init_scale": 2.0**125, "growth_interval": 1}, clean))

    # deepspeed
    out.append(case("deepspeed_runs", "deepspeed", {"growth_interval": 4}, runs))
    out.append(case("deepspeed_hysteresis_absorbing", "deepspeed",
                    {"growth_interval": 3, "hysteresis": 3}, hyst))
    out.append(case("deepspeed_consecutive_hysteresis", "deepspeed",
                    {"growth_interval": 3, "hysteresis": 2, "consecutive_hysteresis": True},
                    hyst))
    out.append(case("deepspeed_floor", "deepspeed",
                    {"init_scale": 256.0, "growth_interval": 3, "min_scale": 1.0}, floor))
    out.append(case("deepspeed_near_f32_max", "deepspeed",
                    {"init_scale": 2.0**125, "growth_interval": 1}, clean))
    out.append(case("deepspeed_odd_factors", "deepspeed",
                    {"init_scale": 1234.5, "growth_factor": 1.7, "backoff_factor": 0.3,
                     "growth_interval": 2}, sparse))

    # megatron
    out.append(case("megatron_runs", "megatron", {"growth_interval": 4}, runs))
    out.append(case("megatron_hysteresis_absorbing", "megatron",
                    {"growth_interval": 3, "hysteresis": 2}, hyst))
    out.append(case("megatron_floor", "megatron",
                    {"init_scale": 256.0, "growth_interval": 3, "min_scale": 1.0}, floor))
    out.append(case("megatron_near_f32_max", "megatron",
                    {"init_scale": 2.0**125, "growth_interval": 1}, clean))
    out.append(case("megatron_odd_factors", "megatron",
                    {"init_scale": 1234.5, "growth_factor": 1.7, "backoff_factor": 0.3,
                     "growth_interval": 2}, sparse))

    # fairseq
    out.append(case("fairseq_runs", "fairseq", {"growth_interval": 4}, runs))
    out.append(case("fairseq_tolerance_below", "fairseq",
                    {"growth_interval": 16, "tolerance": 0.25},
                    pattern((0, 6), (1, 1), (0, 8), (1, 1), (0, 9), (1, 1), (0, 12))))
    out.append(case("fairseq_tolerance_above", "fairseq",
                    {"growth_interval": 16, "tolerance": 0.25},
                    pattern((0, 7), (1, 1), (0, 2), (1, 1), (0, 1), (1, 2), (0, 3), (1, 1),
                            (0, 20))))
    out.append(case("fairseq_floor", "fairseq",
                    {"init_scale": 128.0, "growth_interval": 3, "min_scale": 2.0}, floor))
    out.append(case("fairseq_near_f32_max", "fairseq",
                    {"init_scale": 2.0**125, "growth_interval": 1}, clean))
    out.append(case("fairseq_odd_factors", "fairseq",
                    {"init_scale": 1234.5, "growth_factor": 1.7, "backoff_factor": 0.3,
                     "growth_interval": 2}, sparse))
    return out


def main():
    doc = {
        "about": "Loss-scale trajectories of scaler.policy's four rules; written by "
                 "scripts/golden/scaler_policies.py (its docstring: the upstream functions and "
                 "where ampctl's float32 scale departs from them). Each step is the state after "
                 "that step's update; scale_bits is the float32 bit pattern; upstream_scale is "
                 "the upstream arithmetic's scale (float64 for deepspeed and fairseq).",
        "cases": cases(),
    }
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for c in doc["cases"]:
        d = c["first_upstream_difference"]
        print(f"{c['name']:36s} {len(c['steps'])} steps, final scale {c['steps'][-1]['scale']!r}, "
              f"upstream differs {'never' if d is None else 'from step ' + str(d)}")


if __name__ == "__main__":
    main()
