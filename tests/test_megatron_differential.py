"""paratune's pipeline layer split (`oracle.pipeline_split`) against megatron-core 0.16.1 itself.

`tests/megatron_reference.py` builds megatron-core's own `TransformerConfig` for each case and asks
megatron-core how many decoder / MTP layers every (PP rank, virtual stage) builds; paratune must
accept exactly the cases megatron-core accepts and give the same stages. The cases are generated
deterministically (fixed seed) across the four split mechanisms, the combinations Megatron forbids
and the published recipes. Run with `pytest -s` to see the case counts.
"""

from __future__ import annotations

import importlib.util
import os
import random
from collections import Counter
from functools import cache
from types import ModuleType
from typing import NamedTuple

import pytest

from paratune.oracle.pipeline_split import PipelineSplit, SplitError, split_layers

_REASON = "megatron-core not installed: pip install 'paratune[test]' (megatron-core==0.16.1)"
if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
    if os.environ.get("PARATUNE_REQUIRE_ALL", "0") == "1":
        pytest.fail(f"{_REASON}, and PARATUNE_REQUIRE_ALL=1 makes that an error", pytrace=False)
    pytest.skip(_REASON, allow_module_level=True)


@cache
def ref() -> ModuleType:
    """`tests.megatron_reference`, imported on first use (it loads megatron-core and torch: seconds)."""
    from tests import megatron_reference

    return megatron_reference


SEED = 20250116
NUM_LAYERS = range(1, 131)
PPS = (1, 2, 3, 4, 5, 8, 16)
VPPS = (None, 2, 3, 4, 5, 7, 8)
MTPS = (0, 1, 2)


class Case(NamedTuple):
    mechanism: str
    num_layers: int
    mtp: int
    pp: int
    vpp: int | None
    layout: str | None = None
    first: int | None = None
    last: int | None = None
    embedding: bool = False
    loss: bool = False

    def megatron(self):
        # paratune's VPP 1 means "no virtual pipeline" (EffectiveConfig has no unset VPP); Megatron
        # tells an explicit 1 from None only with PP=1, where it refuses any VPP: compare with None.
        vpp = None if self.vpp == 1 and self.pp == 1 else self.vpp
        return ref().megatron_split(self.num_layers, self.mtp, self.pp, vpp, self.layout,
                                  self.first, self.last, self.embedding, self.loss)

    def paratune(self):
        split = PipelineSplit(layout=self.layout, first=self.first, last=self.last,
                              embedding=self.embedding, loss=self.loss)
        try:
            stages = split_layers(self.num_layers, self.mtp, self.pp, self.vpp, split)
        except SplitError as exc:
            return f"SplitError[{exc.code}]: {exc.message}"
        return tuple((s.decoders, s.embedding, s.loss, s.mtp) for s in stages)


# The published recipes (Megatron-Bridge / NeMo configs).
PUBLISHED = [
    Case("published", 126, 0, 8, 8, embedding=True, loss=True),  # Llama 3.1 405B
    Case("published", 94, 0, 8, 4, embedding=True, loss=True),  # Qwen3-235B-A22B
    Case("published", 61, 1, 8, 4, layout="Et|(tt|)*30mL"),  # DeepSeek-V3 PP8 VPP4
    Case("published", 61, 1, 16, 2, layout="Et*3|(tt|)*29,m|L"),  # DeepSeek-V3 PP16 VPP2
    Case("published", 126, 0, 8, None, first=15, last=15),  # Llama 3.1 405B uneven
]


# ---------------------------------------------------------------- case generators

def _vpp(rng: random.Random) -> int | None:
    """Mostly the brief's VPP values; now and then an explicit 1 (megatron-core: not the same as
    None when PP = 1)."""
    return 1 if rng.random() < 0.06 else rng.choice(VPPS)


def _chunks(pp: int, vpp: int | None) -> int:
    return vpp if vpp and pp > 1 else 1


def even_cases(rng: random.Random, n: int) -> list[Case]:
    out = []
    for _ in range(n):
        pp, vpp, mtp = rng.choice(PPS), _vpp(rng), rng.choice(MTPS)
        unit = pp * _chunks(pp, vpp)
        layers = (unit * rng.randint(1, 130 // unit) if rng.random() < 0.55 and unit <= 130  # aim at the legal ones
                  else rng.choice(NUM_LAYERS))
        out.append(Case("even", layers, mtp, pp, vpp))
    return out


def accounting_cases(rng: random.Random, n: int) -> list[Case]:
    out = []
    for _ in range(n):
        pp, vpp, mtp = rng.choice(PPS), _vpp(rng), rng.choice(MTPS)
        emb, loss = rng.choice(((True, False), (False, True), (True, True)))
        unit = pp * _chunks(pp, vpp)
        if rng.random() < 0.6:
            layers = unit * rng.randint(1, max(1, 132 // unit)) - emb - loss
            if layers < 1:
                layers = rng.choice(NUM_LAYERS)
        else:
            layers = rng.choice(NUM_LAYERS)
        out.append(Case("accounting", min(layers, 130), mtp, pp, vpp, embedding=emb, loss=loss))
    return out


def first_last_cases(rng: random.Random, n: int) -> list[Case]:
    out = []
    for _ in range(n):
        pp, vpp, mtp = rng.choice(PPS), _vpp(rng), rng.choice(MTPS)
        step = vpp or 1
        which = rng.choice(("first", "last", "both", "both"))
        first = step * rng.randint(1, 4) if which in ("first", "both") else None
        last = step * rng.randint(1, 4) if which in ("last", "both") else None
        middle_ranks = pp - (first is not None) - (last is not None)
        per_middle = step * rng.randint(0 if middle_ranks <= 0 else 1, 4)
        layers = (first or 0) + (last or 0) + max(middle_ranks, 0) * per_middle
        roll = rng.random()
        if roll < 0.12:  # illegal or odd stage counts
            bad = rng.choice((0, -1, -step, 1, step + 1, 2 * step - 1, 200))
            if first is not None and (last is None or rng.random() < 0.5):
                first = bad
            else:
                last = bad
        elif roll < 0.30:
            layers += rng.choice((-2, -1, 1, 2, step, pp))
        elif roll < 0.40:
            layers = rng.choice(NUM_LAYERS)
        layers = min(max(layers, 1), 130)
        out.append(Case("first_last", layers, mtp, pp, vpp, first=first, last=last))
    return out


def _render(stages: list[str], rng: random.Random) -> str:
    """A layout string for `stages` in one of Megatron's spellings: plain, `t*n` runs, `(...)*n`
    groups of repeated stages, cosmetic commas."""
    def stage_text(s: str) -> str:
        if rng.random() < 0.5:
            return s
        # compress runs of t as t*n
        out, i = "", 0
        while i < len(s):
            j = i
            while j < len(s) and s[j] == s[i]:
                j += 1
            run = j - i
            out += f"{s[i]}*{run}" if s[i] == "t" and run >= 2 and rng.random() < 0.7 else s[i:j]
            i = j
        return out

    parts: list[str] = []  # tokens already joined with their separators
    i, n = 0, len(stages)
    grouped = rng.random() < 0.6
    while i < n:
        j = i
        while grouped and j + 1 < n and stages[j + 1] == stages[i]:
            j += 1
        run = j - i + 1
        if run >= 2 and j < n - 1:
            parts.append(f"({stage_text(stages[i])}|)*{run}")  # "(tt|)*30" then the next stage
        else:
            for k in range(i, j + 1):
                parts.append(stage_text(stages[k]) + ("|" if k < n - 1 else ""))
        i = j + 1
    text = "".join(parts)
    if rng.random() < 0.3:  # cosmetic commas between tokens
        text = "".join(p + ("," if rng.random() < 0.4 and k < len(parts) - 1 else "") for k, p in enumerate(parts))
    return text


def _decoder_stages(rng: random.Random, count: int) -> list[str]:
    """`count` stages of decoder layers: balanced with embedding and loss counted as one layer each, or
    random (0-5 each)."""
    if rng.random() < 0.5:  # balanced, embedding and loss counted as one layer each
        c = rng.randint(1, 4)
        decoders = [c] * count
        if rng.random() < 0.5 and count > 1:
            decoders[0] -= 1
            decoders[-1] -= 1
    else:
        decoders = [rng.randint(0, 5) for _ in range(count)]
    return ["t" * d for d in decoders]


def _place_mtp(rng: random.Random, stages: list[str], mtp: int, place: str, last_row: int) -> None:
    """Put the `mtp` MTP layers where `place` says (with the loss, a standalone last stage, an early
    stage, split over the last two, before a decoder), in place."""
    count = len(stages)
    if place == "standalone" and count >= 2:
        j = rng.randint(max(last_row, 1), count - 2) if max(last_row, 1) <= count - 2 else count - 2
        for k in range(j + 1, count):
            stages[k] = ""
        stages[j] += "m" * mtp
    elif place == "early" and last_row > 0:
        stages[rng.randint(1, last_row - 1) if last_row > 1 else 0] += "m" * mtp
    elif place == "split" and mtp == 2 and count >= 2:
        stages[-2] += "m"
        stages[-1] += "m"
    elif place == "before_decoder" and count >= 2:
        stages[-2] = "m" * mtp + stages[-2] + "t"
    else:
        stages[-1] += "m" * mtp


def _mutate(rng: random.Random, stages: list[str]) -> float:
    """Break the stages one way in four (E or L missing or twice, an empty or extra or missing stage, an
    invalid symbol), in place; the draw, which also decides the odd syntax of the rendered text."""
    mutate = rng.random()
    if mutate < 0.04:
        stages[0] = stages[0].replace("E", "")  # missing E
    elif mutate < 0.08:
        stages[-1] = stages[-1].replace("L", "")  # missing L
    elif mutate < 0.10:
        stages[-1] = "E" + stages[-1]  # E twice
    elif mutate < 0.13:
        stages.insert(0, "")  # leading empty stage: E is still first in the flat layout
        if rng.random() < 0.5:
            stages.pop()  # keep the count; the trailing stage held L
            stages[-1] += "L"
    elif mutate < 0.20:
        stages.append(rng.choice(("", "t", "tt")))  # stage count off by one
    elif mutate < 0.24 and len(stages) > 1:
        stages.pop(rng.randrange(1, len(stages)))
    elif mutate < 0.26:
        stages[rng.randrange(len(stages))] += rng.choice(("x", " ", "T", "e"))  # invalid symbol
    return mutate


def layout_cases(rng: random.Random, n: int) -> list[Case]:
    out = []
    for _ in range(n):
        pp = rng.choice((1, 1, 2, 2, 3, 4, 4, 5, 8, 8, 16))
        v = rng.choice((1, 1, 2, 2, 3, 4)) if pp < 16 else rng.choice((1, 2))
        stages = _decoder_stages(rng, pp * v)
        mtp = rng.choice(MTPS)
        place = rng.choice(("with_loss", "with_loss", "standalone", "early", "split", "before_decoder"))
        if mtp:
            _place_mtp(rng, stages, mtp, place, last_row=(v - 1) * pp)  # first model index of the last row
        stages[0] = "E" + stages[0]
        stages[-1] += "L"
        mutate = _mutate(rng, stages)
        text = _render(stages, rng)
        if mutate > 0.985:  # odd syntax that Megatron's two regex passes still read in their own way
            text = rng.choice((text.replace("|", "||", 1), "(" + text, text + ")*2", text.replace("t", "t*0", 1),
                               text.replace("(", "((", 1), text.replace("*", "**", 1)))
        flat = "".join(stages)
        layers = flat.count("t")
        m_count = flat.count("m")
        roll = rng.random()
        if roll < 0.10:
            layers += rng.choice((-1, 1))  # wrong decoder count
        elif roll < 0.16:
            m_count = rng.choice([x for x in MTPS if x != m_count])  # wrong MTP count
        layers = min(max(layers, 1), 130)
        vroll = rng.random()
        vpp = None if vroll < 0.55 else v if vroll < 0.80 else 1 if vroll < 0.88 else rng.choice(VPPS)
        out.append(Case("layout", layers, m_count, pp, vpp, layout=text))
    return out


def conflict_cases(rng: random.Random, n: int) -> list[Case]:
    """Combinations TransformerConfig refuses: layout with first/last/accounting, first/last with
    accounting (each generated around a case that alone would be legal)."""
    out = []
    for _ in range(n):
        pp = rng.choice((2, 4, 8))
        vpp = rng.choice((None, 2))
        step = vpp or 1
        kind = rng.choice(("layout+first", "layout+last", "layout+embedding", "layout+loss",
                           "first+embedding", "last+loss", "both+both"))
        layers = 2 * step * pp
        emb = "embedding" in kind or kind == "both+both"
        loss = "loss" in kind or kind == "both+both"
        first = 2 * step if "first" in kind or kind == "both+both" else None
        last = 2 * step if "last" in kind or kind == "both+both" else None
        layout = None
        if kind.startswith("layout"):
            layout = "E" + "|".join(["tt"] * (pp * step)) + "L"
        out.append(Case("conflict", layers, rng.choice(MTPS), pp, vpp, layout=layout, first=first, last=last,
                        embedding=emb, loss=loss))
    return out


def all_cases() -> list[Case]:
    rng = random.Random(SEED)
    return (PUBLISHED + even_cases(rng, 350) + accounting_cases(rng, 350) + first_last_cases(rng, 350)
            + layout_cases(rng, 500) + conflict_cases(rng, 60))


# ---------------------------------------------------------------- tests

def _stages(text: str) -> tuple[tuple[int, bool, bool, int], ...]:
    """Shorthand for expected stages: 'E1 2 2 1L' -> (1,E) (2) (2) (1,L); 'm' suffix digits = MTP."""
    out = []
    for token in text.split():
        emb, loss = token.startswith("E"), token.endswith("L")
        body = token.strip("EL")
        dec, _, mtp = body.partition("m")
        out.append((int(dec), emb, loss, int(mtp or 0)))
    return tuple(out)


def test_megatron_reference_hand_checked():
    """megatron_split on cases derived by hand from get_num_layers_to_build."""
    # Llama 3.1 405B, PP8 VPP8, account for both: (126 + 2) / 8 = 16 per rank, / 8 = 2 per chunk;
    # the first chunk (pp 0, vp 0) gives one to the embedding, the last (pp 7, vp 7) one to the loss.
    got = ref().megatron_split(126, 0, 8, 8, None, None, None, True, True)
    assert got == _stages("E1 " + "2 " * 62 + "1L")
    # Qwen3-235B, PP8 VPP4, account for both: (94 + 2) / 8 = 12 per rank, 3 per chunk.
    assert ref().megatron_split(94, 0, 8, 4, None, None, None, True, True) == _stages("E2 " + "3 " * 30 + "2L")
    # Llama 405B PP8 first=15 last=15: (126 - 30) / 6 = 16 per middle rank.
    assert ref().megatron_split(126, 0, 8, None, None, 15, 15, False, False) == _stages("E15 " + "16 " * 6 + "15L")
    # DeepSeek-V3 PP8 VPP4 "Et|(tt|)*30mL": 32 stages, 1 + 30*2 = 61 decoders, MTP with the loss.
    assert ref().megatron_split(61, 1, 8, 4, "Et|(tt|)*30mL", None, None, False, False) == _stages(
        "E1 " + "2 " * 30 + "0m1L")
    # DeepSeek-V3 PP16 VPP2 "Et*3|(tt|)*29,m|L": 3 + 58 = 61 decoders; MTP alone on (pp 14, vp 1).
    assert ref().megatron_split(61, 1, 16, 2, "Et*3|(tt|)*29,m|L", None, None, False, False) == _stages(
        "E3 " + "2 " * 29 + "0m1 0L")
    # Even split with MTP, no layout: MTP on the last stage with the loss (get_mtp_num_layers_to_build).
    assert ref().megatron_split(8, 2, 2, 2, None, None, None, False, False) == _stages("E2 2 2 2m2L")
    # PP1 with an explicit VPP (1 included) is refused by initialize_model_parallel; None is fine.
    assert isinstance(ref().megatron_split(8, 0, 1, 1, None, None, None, False, False), str)
    assert ref().megatron_split(8, 0, 1, None, None, None, None, False, False) == _stages("E8L")
    # 10 layers do not divide over PP3: get_num_layers_to_build's assert.
    assert "divisible" in ref().megatron_split(10, 0, 3, None, None, None, None, False, False)
    # first=16 > 10 layers over PP3: the middle rank would build -6 (config accepts it).
    assert "< 0" in ref().megatron_split(10, 0, 3, None, None, 16, None, False, False)


def test_vpp_without_pp_is_refused_by_initialize_model_parallel():
    """The one condition megatron_split mirrors instead of calling: initialize_model_parallel with a
    VPP size (1 included) and PP = 1 raises; with PP = 2 a VPP of 1 is accepted."""
    assert "greater than 1" in ref().initialize_refusal(2, pp=1, vpp=1)
    assert "greater than 1" in ref().initialize_refusal(2, pp=1, vpp=2)
    assert ref().initialize_refusal(2, pp=1, vpp=None) is None
    assert ref().initialize_refusal(2, pp=2, vpp=1) is None


def test_paratune_split_matches_megatron_core(record_property):
    cases = all_cases()
    assert len(cases) >= 1000
    tally: Counter = Counter()
    mismatches: list[str] = []
    odd_totals = 0
    for case in cases:
        want, got = case.megatron(), case.paratune()
        legal = not isinstance(want, str)
        vpp_tag = "vpp" if case.vpp is not None else "novpp"
        tally[(case.mechanism, vpp_tag, "legal" if legal else "illegal")] += 1
        if legal and sum(s[0] for s in want) != case.num_layers:
            odd_totals += 1
        if isinstance(want, str) and isinstance(got, str):
            continue
        if want != got:
            mismatches.append(f"{case}\n    megatron: {want}\n    paratune: {got}")
    lines = [f"megatron differential: {len(cases)} cases, {len(mismatches)} mismatches, "
             f"{odd_totals} legal cases whose decoders do not sum to num_layers"]
    for mech in ("published", "even", "accounting", "first_last", "layout", "conflict"):
        row = {k: v for k, v in tally.items() if k[0] == mech}
        if not row:
            continue
        legal = sum(v for k, v in row.items() if k[2] == "legal")
        illegal = sum(v for k, v in row.items() if k[2] == "illegal")
        split = ", ".join(f"{k[1]} {k[2]} {v}" for k, v in sorted(row.items()))
        lines.append(f"  {mech:<11} {legal + illegal:4d} cases: {legal} legal, {illegal} illegal ({split})")
    summary = "\n".join(lines)
    print("\n" + summary)
    record_property("megatron_differential", summary)
    assert not mismatches, f"{len(mismatches)} mismatches; the first 20:\n" + "\n".join(mismatches[:20])


def grid_cases() -> list[tuple[int, int, int, int, int, int]]:
    rng = random.Random(SEED + 1)
    out = []
    while len(out) < 240:
        tp, pp, cp = rng.choice((1, 2, 4, 8)), rng.choice((1, 2, 3, 4, 8)), rng.choice((1, 1, 2, 4))
        ep, etp = rng.choice((1, 2, 4, 8, 16)), rng.choice((1, 1, 2, 4, 8))
        if rng.random() < 0.5:  # a multiple of one of the two grids, so both outcomes occur
            world = rng.choice((tp * pp * cp, etp * ep * pp)) * rng.choice((1, 2, 3, 4))
        else:
            world = rng.choice((1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64))
        if world <= 256:
            out.append((world, tp, pp, cp, ep, etp))
    return out


def test_megatron_grid_rules(record_property):
    """megatron-core's own initialize_model_parallel (on torch's fake backend) accepts a grid exactly
    when world % (TP*PP*CP) == 0 and world % (ETP*EP*PP) == 0."""
    cases = grid_cases()
    bad, ok = [], 0
    for world, tp, pp, cp, ep, etp in cases:
        formula = world % (tp * pp * cp) == 0 and world % (etp * ep * pp) == 0
        got = ref().megatron_grid_ok(world, tp, pp, cp, ep, etp)
        ok += got
        if got != formula:
            bad.append(f"world={world} tp={tp} pp={pp} cp={cp} ep={ep} etp={etp}: megatron {got}, formula {formula}")
    summary = f"megatron grid: {len(cases)} cases, {ok} accepted, {len(cases) - ok} refused, {len(bad)} mismatches"
    print("\n" + summary)
    record_property("megatron_grid", summary)
    assert not bad, "\n".join(bad[:20])
