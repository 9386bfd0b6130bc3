"""How Megatron places decoder layers on pipeline stages: the four split mechanisms, exactly as
megatron-core 0.16.1 (the pinned version, `MEGATRON_CORE_VERSION`) accepts and counts them.

Sources (megatron-core 0.16.1, PyPI wheel):
- `transformer/transformer_config.py` `TransformerConfig.__post_init__`: which combinations are
  refused (layout vs the other four arguments, first/last vs embedding/loss accounting, first/last
  counts > 0 and divisible by VPP, middle layers over middle stages, accounting divisibility).
- `transformer/transformer_block.py` `get_num_layers_to_build`: the per-(PP rank, virtual stage)
  decoder count of the even split, the first/last split and the accounting split, and its asserts.
- `transformer/pipeline_parallel_layer_layout.py` `PipelineParallelLayerLayout`: the layout string
  syntax (`E t m L`, `|` between stages, `x*n` and `(...)*n`, cosmetic commas; stages listed
  VPP-major) and `validate_layer_layout` (E first, L last, each once; decoder and MTP counts; MTP
  after every decoder, only in the last virtual stage of a rank, all in one stage).
megatron-core's `parallel_state.initialize_model_parallel` refuses a virtual pipeline without pipeline
parallelism (`vpp_needs_pp`).
For the even, first/last and accounting splits Megatron builds the MTP block on the last stage (with
the loss); a layout places it where its `m` stands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

MEGATRON_CORE_VERSION = "0.16.1"
_SYMBOLS = "EtmL"
MAX_LAYOUT_SYMBOLS = 1 << 16  # a written-out layout has a few symbols per layer; the largest models have hundreds
_GROUP_REPEAT = re.compile(r"\(([^)]+)\)\*(\d+)")
_SYMBOL_REPEAT = re.compile(r"(.)\*(\d+)")


@dataclass(frozen=True, slots=True)
class PipelineSplit:
    """Megatron's five split arguments (`pipeline_model_parallel_layout`,
    `decoder_first/last_pipeline_num_layers`, `account_for_embedding/loss_in_pipeline_split`)."""

    layout: str | None = None
    first: int | None = None
    last: int | None = None
    embedding: bool = False
    loss: bool = False

    @property
    def mechanism(self) -> str:
        """even | accounting | first_last | layout (the first one set, as Megatron reads them)."""
        if self.layout is not None:
            return "layout"
        if self.first is not None or self.last is not None:
            return "first_last"
        return "accounting" if self.embedding or self.loss else "even"


@dataclass(frozen=True, slots=True)
class Stage:
    """One virtual pipeline stage: its decoder layers, and whether it holds the embedding, the loss
    (with the output layer) and how many MTP layers."""

    decoders: int
    embedding: bool
    loss: bool
    mtp: int


class SplitError(ValueError):
    """A split Megatron refuses: a stable code and Megatron's reason."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _expanded(pattern: re.Pattern[str], text: str, layout: str) -> str:
    """`text` with every `pattern` repeat (`x*n`, `(...)*n`) written out, refused before it grows past
    MAX_LAYOUT_SYMBOLS: `t*99999999999` must not allocate 100 GB."""
    size = len(text)

    def repeat(m: re.Match[str]) -> str:
        nonlocal size
        digits = m.group(2)
        count = int(digits) if len(digits) <= 9 else MAX_LAYOUT_SYMBOLS + 1
        size += len(m.group(1)) * count - len(m.group(0))
        if size > MAX_LAYOUT_SYMBOLS:
            raise SplitError("layout_size", f"pipeline layout {layout[:80]!r} expands past {MAX_LAYOUT_SYMBOLS:,} "
                             "symbols, more than any model has layers")
        return m.group(1) * count

    return pattern.sub(repeat, text)


def parse_layout(text: str) -> list[str]:
    """The stages of a layout string, each a string of symbols (Megatron's `parse_str_to_list`)."""
    flat = text.replace(",", "")
    if len(flat) > MAX_LAYOUT_SYMBOLS:
        raise SplitError("layout_size", f"pipeline layout is {len(flat):,} characters, over {MAX_LAYOUT_SYMBOLS:,}")
    flat = _expanded(_GROUP_REPEAT, flat, text)
    flat = _expanded(_SYMBOL_REPEAT, flat, text)
    stages = flat.split("|")
    for stage in stages:
        bad = set(stage) - set(_SYMBOLS)
        if bad:
            raise SplitError("layout_syntax", f"pipeline layout {text[:80]!r}: unknown symbol(s) "
                             f"{''.join(sorted(bad))!r}; known: E (embedding), t (decoder), m (MTP), L (loss)")
    return stages


def _layout_stages(text: str, num_layers: int, mtp: int, pp: int, vpp: int | None) -> tuple[Stage, ...]:
    stages = parse_layout(text)
    if len(stages) % pp:
        raise SplitError("layout_pp", f"pipeline layout has {len(stages)} stages, not a multiple of PP={pp}")
    v = len(stages) // pp
    if vpp is not None and vpp != 1 and vpp != v:
        raise SplitError("layout_vpp", f"pipeline layout has {v} virtual stages per rank, VPP is {vpp}")
    if vpp == 1 and v != 1:
        raise SplitError("layout_vpp", f"pipeline layout has {v} virtual stages per rank, VPP is 1")
    flat = "".join(stages)
    if not flat or flat[0] != "E" or flat[-1] != "L" or flat.count("E") != 1 or flat.count("L") != 1:
        raise SplitError("layout_edges", "pipeline layout must start with E and end with L, each exactly once")
    if flat.count("t") != num_layers:
        raise SplitError("layout_decoders", f"pipeline layout has {flat.count('t')} decoder layers, "
                         f"num_layers is {num_layers}")
    if flat.count("m") != mtp:
        raise SplitError("layout_mtp", f"pipeline layout has {flat.count('m')} MTP layers, mtp_num_layers is {mtp}")
    if "m" in flat and "t" in flat[flat.index("m"):]:
        raise SplitError("layout_mtp_order", "pipeline layout places decoder layers after an MTP layer")
    for i, stage in enumerate(stages):
        if "m" in stage and i // pp != v - 1:
            raise SplitError("layout_mtp_stage", "MTP layers must sit in the last virtual stage of a pipeline rank")
        if "m" in stage and stage.count("m") != mtp:
            raise SplitError("layout_mtp_stage", "all MTP layers must sit in one virtual stage")
    return tuple(Stage(s.count("t"), "E" in s, "L" in s, s.count("m")) for s in stages)


def _per_rank(num_layers: int, pp: int, split: PipelineSplit) -> tuple[int, ...]:
    """Decoder layers per pipeline rank before the virtual split (`get_num_layers_to_build`)."""
    if split.mechanism == "first_last":
        rest, ranks = num_layers, pp
        for count in (split.first, split.last):
            if count is not None:
                rest, ranks = rest - count, ranks - 1
        if ranks > 0 and rest % ranks:
            raise SplitError("split_middle", f"{rest} middle layers do not divide over {ranks} middle stages")
        per = [rest // ranks if ranks > 0 else 0] * pp
        if split.first is not None:
            per[0] = split.first
        if split.last is not None:
            per[-1] = split.last
        if min(per) < 0:
            raise SplitError("split_middle", f"first/last stage counts leave {rest} layers for the middle stages")
        return tuple(per)
    total = num_layers + split.embedding + split.loss
    if total % pp:
        what = "num_layers" if split.mechanism == "even" else "num_layers + embedding/loss"
        raise SplitError("split_pp", f"{what} = {total} is not divisible by PP={pp}")
    return (total // pp,) * pp


def _check_config(num_layers: int, pp: int, vpp: int | None, split: PipelineSplit) -> None:
    """`TransformerConfig.__post_init__`'s refusals for the non-layout splits."""
    if split.mechanism == "first_last":
        if split.embedding or split.loss:
            raise SplitError("split_conflict", "first/last stage layer counts cannot be combined with "
                             "account_for_embedding/loss_in_pipeline_split")
        rest, ranks = num_layers, pp
        for name, count in (("first", split.first), ("last", split.last)):
            if count is None:
                continue
            if count <= 0:
                raise SplitError("split_first_last", f"decoder_{name}_pipeline_num_layers must be > 0, got {count}")
            if vpp is not None and count % vpp:
                raise SplitError("split_first_last", f"decoder_{name}_pipeline_num_layers={count} is not "
                                 f"divisible by VPP={vpp}")
            rest, ranks = rest - count, ranks - 1
        if bool(rest) != bool(ranks):
            raise SplitError("split_middle", f"{rest} middle layers but {ranks} middle pipeline stages")
        if ranks and rest % ranks:
            raise SplitError("split_middle", f"{rest} middle layers do not divide over {ranks} middle stages")
        if ranks and vpp is not None and (rest // ranks) % vpp:
            raise SplitError("split_vpp", f"{rest // ranks} layers per middle stage are not divisible by VPP={vpp}")


@lru_cache(maxsize=8192)
def split_layers(num_layers: int, mtp_layers: int, pp: int, vpp: int | None, split: PipelineSplit) -> tuple[Stage, ...]:
    """Every virtual stage in model order (index = virtual rank x PP + pipeline rank); raises
    `SplitError` wherever megatron-core refuses. `vpp` None or 1: no virtual pipeline (a layout
    then sets it)."""
    if split.layout is not None:
        if split.first is not None or split.last is not None or split.embedding or split.loss:
            raise SplitError("split_conflict", "pipeline_model_parallel_layout cannot be combined with the "
                             "other pipeline split arguments")
        stages = _layout_stages(split.layout, num_layers, mtp_layers, pp, vpp)
        if pp == 1 and len(stages) > 1:
            raise SplitError("vpp_needs_pp", "a virtual pipeline needs PP>1")
        return stages
    if vpp is not None and vpp > 1 and pp == 1:
        raise SplitError("vpp_needs_pp", f"VPP={vpp} needs PP>1")
    _check_config(num_layers, pp, vpp, split)
    per_rank = _per_rank(num_layers, pp, split)
    v = vpp if vpp is not None and pp > 1 else 1
    chunks = [[0] * pp for _ in range(v)]
    for rank, count in enumerate(per_rank):
        if count % v:
            raise SplitError("split_vpp", f"{count} layers on pipeline rank {rank} are not divisible by VPP={v}")
        for j in range(v):
            chunks[j][rank] = count // v
    if split.embedding:
        chunks[0][0] -= 1
    if split.loss:
        chunks[-1][-1] -= 1
    if chunks[0][0] < 0 or chunks[-1][-1] < 0:
        raise SplitError("split_vpp", "not enough layers in the first or last virtual stage to hold the "
                         "embedding / loss")
    n = pp * v
    return tuple(Stage(chunks[k // pp][k % pp], k == 0, k == n - 1, mtp_layers if k == n - 1 else 0)
                 for k in range(n))


@lru_cache(maxsize=8192)
def split_outcome(num_layers: int, mtp_layers: int, pp: int, vpp: int | None,
                  split: PipelineSplit) -> tuple[tuple[Stage, ...], SplitError | None]:
    """(`stages_or_spread`, the `SplitError` Megatron raises or None), cached refusals included: a
    search meets the same refused split for many layouts."""
    try:
        stages, error = split_layers(num_layers, mtp_layers, pp, vpp, split), None
    except SplitError as exc:
        stages, error = (), exc
    if stages and sum(s.decoders for s in stages) == num_layers:
        return stages, error
    n = pp * (vpp or 1)
    q, r = divmod(num_layers, n)
    return tuple(Stage(q + (1 if k < r else 0), k == 0, k == n - 1, mtp_layers if k == n - 1 else 0)
                 for k in range(n)), error


def stages_or_spread(num_layers: int, mtp_layers: int, pp: int, vpp: int | None, split: PipelineSplit
                     ) -> tuple[Stage, ...]:
    """`split_layers`, or where Megatron refuses the split (or it builds another number of decoders)
    the layers spread over the PP x VPP stages as evenly as possible (the earlier take the remainder),
    so that estimates of an illegal layout stay finite."""
    return split_outcome(num_layers, mtp_layers, pp, vpp, split)[0]


def balanced_layout(num_layers: int, mtp_layers: int, stages: int) -> str | None:
    """A layout string over `stages` stages that spreads the decoders evenly, counting the embedding
    and the loss (with the MTP layers) as one layer each, as Megatron-Bridge's DeepSeek-V3 and Kimi
    recipes do; the surplus goes to the middle stages first. None when some stage would be empty."""
    units = num_layers + 2 + mtp_layers
    if stages < 2 or units < stages:
        return None
    base, extra = divmod(units, stages)
    sizes = [base] * stages
    order = [*range(1, stages - 1), stages - 1, 0]  # middle stages first, then the loss's, then the embedding's
    for k in range(extra):
        sizes[order[k % stages]] += 1
    sizes[0] -= 1
    sizes[-1] -= 1 + mtp_layers
    if sizes[-1] < 0:
        return None
    parts = ["t" * count for count in sizes]
    parts[0] = "E" + parts[0]
    parts[-1] += "m" * mtp_layers + "L"
    return compact_layout(parts)


def compact_layout(stages: list[str]) -> str:
    """A layout string for `stages` in Megatron's repeat syntax (`t*n`, `(...|)*n` for runs of equal
    middle stages); `parse_layout` reads it back to the same stages."""
    def short(stage: str) -> str:
        return re.sub(r"t{3,}", lambda m: f"t*{len(m.group(0))}", stage)

    if len(stages) == 1:
        return short(stages[0])
    text, k, middle = short(stages[0]) + "|", 1, stages[1:-1]
    while k <= len(middle):
        n = 1
        while k - 1 + n < len(middle) and middle[k - 1 + n] == middle[k - 1]:
            n += 1
        text += f"({short(middle[k - 1])}|)*{n}" if n > 1 else short(middle[k - 1]) + "|"
        k += n
    return text + short(stages[-1])


@lru_cache(maxsize=4096)
def candidate_splits(num_layers: int, mtp_layers: int, pp: int, vpp: int) -> tuple[PipelineSplit, ...]:
    """The splits the search tries for one PP x VPP: the even split where Megatron accepts it;
    otherwise embedding/loss accounting, the most balanced first/last counts, and a balanced
    layout string, each only where Megatron accepts it. Empty when no split exists."""
    v = vpp if vpp > 1 else None
    even = PipelineSplit()
    if _accepted(num_layers, mtp_layers, pp, v, even):
        return (even,)
    if pp == 1:
        return ()
    out = [s for s in (PipelineSplit(embedding=True, loss=True), PipelineSplit(embedding=True),
                       PipelineSplit(loss=True)) if _accepted(num_layers, mtp_layers, pp, v, s)][:1]
    first_last = _balanced_first_last(num_layers, mtp_layers, pp, v)
    if first_last is not None:
        out.append(first_last)
    layout = balanced_layout(num_layers, mtp_layers, pp * vpp)
    if layout is not None and _accepted(num_layers, mtp_layers, pp, v, PipelineSplit(layout=layout)):
        out.append(PipelineSplit(layout=layout))
    distinct: dict[tuple[Stage, ...], PipelineSplit] = {}
    for split in out:  # a layout that reproduces an accounting split adds nothing
        distinct.setdefault(split_layers(num_layers, mtp_layers, pp, v, split), split)
    return tuple(distinct.values())


def _accepted(num_layers: int, mtp: int, pp: int, vpp: int | None, split: PipelineSplit) -> bool:
    try:
        split_layers(num_layers, mtp, pp, vpp, split)
    except SplitError:
        return False
    return True


def _balanced_first_last(num_layers: int, mtp: int, pp: int, vpp: int | None) -> PipelineSplit | None:
    """The accepted first/last counts whose largest pipeline rank is smallest (ties: the lighter first
    rank, which holds the embedding and the most micro-batches in flight). Candidates are built from
    the per-middle-rank count q (a multiple of VPP): first only, last only, or both around q."""
    step = vpp or 1
    options: list[PipelineSplit] = []
    for q in range(0, num_layers + 1, step):
        rest = num_layers - (pp - 1) * q
        if q and rest > 0:
            options += [PipelineSplit(first=rest), PipelineSplit(last=rest)]
        both = num_layers - (pp - 2) * q
        if (q or pp == 2) and both >= 2 * step:
            first = step * (both // (2 * step))
            options.append(PipelineSplit(first=first, last=both - first))
        if pp == 2:
            break
    best: tuple[tuple[int, int], PipelineSplit] | None = None
    for split in options:
        try:
            stages = split_layers(num_layers, mtp, pp, vpp, split)
        except SplitError:
            continue
        per_rank = [sum(stages[j * pp + r].decoders for j in range(len(stages) // pp)) for r in range(pp)]
        if sum(per_rank) != num_layers:
            continue
        score = (max(per_rank), per_rank[0])
        if best is None or score < best[0]:
            best = (score, split)
    return None if best is None else best[1]
