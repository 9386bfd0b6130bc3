"""Layouts and memory as Megatron and Primus run them: the published uneven splits, the stacks'
argument names, recompute modules, bf16 gradient reduce, FP8 primary weights, FSDP rules, and the
published Mixtral recipe as the main job. Expected numbers are derived by hand in each test."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from paratune.oracle.errors import InputError
from paratune.oracle.evaluate import evaluate_memory_only
from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.legality import validate
from paratune.oracle.memory.activations import layer_acts
from paratune.oracle.model_shape import model_shape
from paratune.oracle.specs import TrialConfig
from paratune.oracle.specs.search import SearchConstraints

from .conftest import EXAMPLES, PARATUNE, example
from .test_server_common import in_process, portal_client

H100_32N = EXAMPLES / "clusters" / "h100-32n.yaml"


def workload(tmp_path: Path, text: str, name: str = "w.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return load_workload(path), path


def codes(w, c, **knobs) -> set[str]:
    return {v.code for v in validate(w.model, w.effective(TrialConfig(**knobs)), c)}


def stage_layers(result) -> list[int]:
    keys = sorted((k for k in result.breakdown if k.startswith("stage_")), key=lambda k: int(k.split("_")[1]))
    return [int(result.breakdown[k]) for k in keys]


LLAMA405B = """
extends: llama3.1-405b
stack: megatron-bridge
seq_length: 8192
global_batch_size: 256
tensor_model_parallel_size: 8
pipeline_model_parallel_size: 8
num_virtual_stages_per_pipeline_rank: 8
context_parallel_size: 2
account_for_embedding_in_pipeline_split: true
account_for_loss_in_pipeline_split: true
use_distributed_optimizer: true
"""


def test_llama405b_pp8_vpp8_with_embedding_and_loss_accounting(tmp_path):
    # Megatron-Bridge's 405B recipe: 126 + 2 = 128 units, 16 per PP rank, 2 per virtual stage; the first
    # stage holds E + 1 decoder, the last 1 decoder + L (megatron-core get_num_layers_to_build).
    w, _ = workload(tmp_path, LLAMA405B)
    c = load_cluster(H100_32N)
    r = evaluate_memory_only(w, c)
    assert r.legal, r.reason
    assert stage_layers(r) == [1] + [2] * 62 + [1]
    # Without the flags Megatron refuses: 126 / 8 is not whole.
    assert "split_pp" in codes(w, c, pp_embedding_in_split=False)


def test_layout_string_and_first_last_counts(tmp_path):
    c = load_cluster(H100_32N)
    w, _ = workload(tmp_path, "extends: deepseek-v3\npipeline_model_parallel_size: 8\nexpert_model_parallel_size: 32\n"
                    "expert_tensor_parallel_size: 1\ntensor_model_parallel_size: 2\nglobal_batch_size: 1024\n"
                    "pipeline_model_parallel_layout: 'Et|(tt|)*30mL'\nuse_distributed_optimizer: true\n")
    cfg = w.effective()
    assert cfg.vpp == 4  # 32 stages / PP 8, read from the layout
    r = evaluate_memory_only(w, c)
    assert r.legal, r.reason
    assert stage_layers(r) == [1] + [2] * 30 + [0]  # the last stage holds only the MTP layer and the loss
    assert "layout_pp" in codes(w, c, pp_layout="Et|(tt|)*29mL")  # 31 stages: not a multiple of PP 8
    assert "layout_decoders" in codes(w, c, pp_layout="E|(tt|)*30mL")  # 60 decoders, the model has 61
    assert "layout_mtp_order" in codes(w, c, pp_layout="Et|tm|(tt|)*29,tL")  # decoders after the MTP layer
    # decoder_last_pipeline_num_layers 5: seven stages of 8 and a last stage of 5 (Primus run_dsv3.sh)
    assert stage_layers(evaluate_memory_only(w, c, TrialConfig(pp_last_layers=5))) == [8] * 7 + [5]
    assert "split_middle" in codes(w, c, pp_last_layers=6)  # 55 middle layers over 7 stages


def test_megatron_refusals_on_expert_grid_and_fsdp():
    m, mc = example("mixtral")
    assert "fsdp2_pp" in codes(m, mc, use_torch_fsdp2=True, use_distributed_optimizer=False)  # PP 4
    assert "fsdp2_ep" in codes(m, mc, use_torch_fsdp2=True, use_distributed_optimizer=False, pp=1)  # EP 8
    w, c = example("llama70b")
    assert "fsdp2_pp" not in codes(w, c, use_torch_fsdp2=True, use_distributed_optimizer=False, pp=1, vpp=1,
                                   tp=8, cp=1)


def test_ep_with_tp_needs_sequence_parallelism(tmp_path):
    w, _ = workload(tmp_path, "extends: mixtral-8x22b\nexpert_model_parallel_size: 8\n"
                    "tensor_model_parallel_size: 2\nsequence_parallel: false\nglobal_batch_size: 64\n")
    c = load_cluster(EXAMPLES / "clusters" / "mi355x-4n.yaml")
    assert "ep_tp_needs_sp" in codes(w, c)
    assert "ep_tp_needs_sp" not in codes(w, c, tp=1)


def test_recompute_modules_drop_what_megatron_recomputes():
    w, c = example("llama70b")
    g = model_shape(w.model)
    none = layer_acts(g, 4, True, True, (), 8192, 4)
    mlp = layer_acts(g, 4, True, True, ("mlp",), 8192, 4)
    # The checkpointed MLP keeps only its input: SwiGLU's gate+up (2 x 2 B x ffn/TP) and the fc2 input
    # (2 B x ffn/TP) go, per token: (4 + 2) x 28672 / 4 bytes.
    assert none.dense - mlp.dense == pytest.approx(6 * 28672 / 4)
    # Megatron's default selective module is core_attn; with flash attention it only drops the fp32
    # log-sum-exp (4 B per head per token).
    core = layer_acts(g, 4, True, True, ("core_attn",), 8192, 4)
    assert none.dense - core.dense == pytest.approx(4 * 64 / 4)
    cfg = w.effective(TrialConfig(recompute_granularity="selective"))
    assert cfg.recompute_modules == ("core_attn",)
    assert w.effective(TrialConfig(recompute_modules=["mlp", "core_attn"])).recompute_granularity == "selective"
    assert "recompute_mla_up_proj" in codes(w, c, recompute_modules=["mla_up_proj"])


def test_model_state_bytes_follow_the_dtypes():
    w, c = example("llama70b")  # BF16, distributed optimizer, DP x CP = 4
    c = c.model_copy(update={"search": SearchConstraints(allow={"fp8": ("none", "hybrid")})})  # FP8 is the user's call
    fp32 = evaluate_memory_only(w, c).breakdown
    bf16 = evaluate_memory_only(w, c, TrialConfig(grad_reduce_in_fp32=False)).breakdown
    assert bf16["mem_grads"] == pytest.approx(fp32["mem_grads"] / 2)  # 4 B -> 2 B main gradients
    fp8 = evaluate_memory_only(w, c, TrialConfig(fp8="hybrid")).breakdown
    primary = evaluate_memory_only(w, c, TrialConfig(fp8="hybrid", fp8_param_gather=True)).breakdown
    # FP8 primary weights: the linear weights lose their 2 B bf16 copy, the FP8 copy (2 B) stays.
    assert fp8["mem_weights"] - primary["mem_weights"] == pytest.approx(fp8["mem_fp8_weight_copies"])
    offload = evaluate_memory_only(w, c, TrialConfig(optimizer_cpu_offload=True)).breakdown
    assert offload["mem_optimizer"] == 0.0  # optimizer_offload_fraction 1.0: all of it on the host


def test_real_arguments_are_accepted_and_reported_and_typos_are_not(tmp_path):
    w, _ = workload(tmp_path, "extends: llama3-8b\nmoe_router_fusion: true\nrecompute_granularity: selective\n"
                    "recompute_modules: [mlp]\nnum_layers_per_virtual_pipeline_stage: 4\n"
                    "pipeline_model_parallel_size: 2\n")
    assert w.not_modelled == ("moe_router_fusion",)
    assert w.training.virtual_pipeline_model_parallel_size == 4  # 32 layers / PP 2 / 4 per chunk
    assert w.training.recompute_modules == ("mlp",)
    with pytest.raises(InputError, match="did you mean 'recompute_modules'"):
        workload(tmp_path, "extends: llama3-8b\nrecompute_module: [mlp]\n", "bad.yaml")


def test_stack_defaults():
    primus, _ = example("mixtral")
    assert primus.stack == "primus" and primus.training.use_distributed_optimizer
    bridge = load_workload(EXAMPLES / "workloads" / "llama3-70b-h100.yaml")
    assert bridge.stack == "megatron-lm" and bridge.training.grad_reduce_in_fp32  # the CLI's fp32 promotion


def test_the_published_mixtral_recipe_is_the_main_job_and_fits():
    w = load_workload(EXAMPLES / "workloads" / "mixtral-8x22b-mi355x-recipe.yaml")
    c = load_cluster(EXAMPLES / "clusters" / "mi355x-4n.yaml")
    r = evaluate_memory_only(w, c)
    assert r.legal and r.fits, r.reason
    cfg = w.effective()
    assert (cfg.mbs, cfg.vpp, cfg.gbs, cfg.recompute_method, cfg.recompute_num_layers) == (1, 2, 512, "block", 1)
    literal = evaluate_memory_only(*example("mixtral"))
    assert literal.legal and not literal.fits  # the YAML as written (MBS 2, no recompute) does not fit
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    first_command = readme[readme.index("```bash"):readme.index("```", readme.index("```bash") + 3)]
    assert "mixtral-8x22b-mi355x-recipe.yaml" in first_command


# One workload per new form of issue 11, on 32 x 8 H100: (file text, expected decoders per stage).
DSV3 = ("extends: deepseek-v3\npipeline_model_parallel_size: 8\nexpert_model_parallel_size: 32\n"
        "expert_tensor_parallel_size: 1\ntensor_model_parallel_size: 2\nglobal_batch_size: 1024\n"
        "use_distributed_optimizer: true\n")
LLAMA70B = ("extends: llama3-70b\nseq_length: 8192\nglobal_batch_size: 128\ntensor_model_parallel_size: 4\n"
            "pipeline_model_parallel_size: 4\nuse_distributed_optimizer: true\n")
FORMS = {
    # layout string: E + 1 decoder, 30 stages of 2, then MTP + loss (Megatron-Bridge's DeepSeek-V3 recipe)
    "layout": (DSV3 + "pipeline_model_parallel_layout: 'Et|(tt|)*30mL'\n", [1] + [2] * 30 + [0]),
    # embedding/loss accounting: (126 + 2) / 8 = 16 per rank, 2 per virtual stage, 1 at both ends
    "accounting": (LLAMA405B, [1] + [2] * 62 + [1]),
    # first/last counts: 61 = 7 x 8 + 5
    "first_last": (DSV3 + "decoder_last_pipeline_num_layers: 5\n", [8] * 7 + [5]),
    # 80 layers over PP 4: 20 each; the three knobs below do not move layers
    "recompute_modules": (LLAMA70B + "recompute_granularity: selective\nrecompute_modules: [core_attn, mlp]\n",
                          [20] * 4),
    "bf16_grad_reduce": (LLAMA70B + "grad_reduce_in_bf16: true\n", [20] * 4),
    "fp8_param_gather": (LLAMA70B + "fp8: hybrid\nfp8_param_gather: true\n", [20] * 4),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_new_form_projects_from_the_cli_with_stage_counts(tmp_path, form):
    text, expected = FORMS[form]
    _, path = workload(tmp_path, text)
    stack = ["--stack", "megatron-bridge"] if "stack: megatron-bridge" in text else []  # one statement of the stack
    out = subprocess.run([PARATUNE, "project", "memory", "--workload", str(path), "--target-cluster", str(H100_32N),
                          *stack, "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["legal"], result["reason"]
    assert [int(result["breakdown"][f"stage_{k}_layers"]) for k in range(len(expected))] == expected
    assert f"stage_{len(expected)}_layers" not in result["breakdown"]


def test_each_new_form_projects_over_mcp_with_stage_counts(tmp_path):
    cpath = tmp_path / "h100-32n.yaml"
    cpath.write_text(H100_32N.read_text())
    bridge = tmp_path / "h100-32n-bridge.yaml"  # the cluster states the stack a workload's `stack:` agrees with
    bridge.write_text(H100_32N.read_text().replace("h100-sxm}", "h100-sxm, stack: megatron-bridge}"))
    with in_process(tmp_path, open_run=False) as (server, session), portal_client(server) as (portal, client):
        for form, (text, expected) in sorted(FORMS.items()):
            wpath = tmp_path / f"{form}.yaml"
            wpath.write_text(text)
            session.open_run(wpath, bridge if "stack: megatron-bridge" in text else cpath, resume=False)
            result = portal.call(lambda: client.call_tool("evaluate_memory_only", {"config": {}}))
            assert not result.is_error, result.content[0].text
            breakdown = result.structured_content["result"]["breakdown"]
            assert [int(breakdown[f"stage_{k}_layers"]) for k in range(len(expected))] == expected, form
    # the knobs act: bf16 gradients take half the fp32 gradient bytes (4 B -> 2 B per parameter)
    fp32 = evaluate_memory_only(*_load(tmp_path, LLAMA70B, "fp32.yaml"))
    bf16 = evaluate_memory_only(*_load(tmp_path, FORMS["bf16_grad_reduce"][0], "bf16.yaml"))
    assert bf16.breakdown["mem_grads"] == pytest.approx(fp32.breakdown["mem_grads"] / 2)


def _load(tmp_path: Path, text: str, name: str):
    w, _ = workload(tmp_path, text, name)
    return w, load_cluster(H100_32N)


def test_cuda_graph_memory_is_static_inputs_and_masks_per_stored_layer_sample():
    """Hand derivation (megatron-core 0.16.1 cuda_graphs.py, TE graph.py): a graph per layer and
    micro-batch; the stored samples each keep a static [tokens, h] BF16 input (tokens / TP under SP)
    and, with attention graphed, a boolean [MBS, seq/CP, seq] mask; ~3 shared grad-output buffers."""
    w, c = example("llama70b")
    plain = TrialConfig(vpp=1, pp_schedule="1f1b")  # one chunk per stage: the samples are its layers x in-flight
    cfg = w.effective(plain)
    assert cfg.recompute_granularity is None  # whole layers stored
    eager = evaluate_memory_only(w, c, plain).breakdown
    graphed = TrialConfig(vpp=1, pp_schedule="1f1b", cuda_graph_impl="transformer_engine")
    whole = evaluate_memory_only(w, c, graphed).breakdown
    token = 2 * w.model.hidden_size * cfg.mbs * cfg.seq_length / cfg.cp / cfg.tp
    mask = cfg.mbs * cfg.seq_length / cfg.cp * cfg.seq_length
    samples = whole["mem_inflight_microbatches"] * whole[f"stage_{int(whole['mem_stage'])}_layers"]
    assert whole["mem_cuda_graphs"] * 2**30 == pytest.approx(samples * (token + mask) + 3 * token)
    assert eager["mem_cuda_graphs"] == 0.0
    mlp_only = w.model_copy(update={"training": w.training.model_copy(update={"cuda_graph_scope": ("mlp",)})})
    mlp = evaluate_memory_only(mlp_only, c, graphed).breakdown
    assert mlp["mem_cuda_graphs"] * 2**30 == pytest.approx(3 * token)  # no layer input, no mask graphed
    assert "cuda_graph_recompute" in codes(w, c, cuda_graph_impl="local", recompute_granularity="full")
