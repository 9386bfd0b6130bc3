"""GPUs as users name them: aliases, today's parts with their sources, a GPU the catalog lacks given
in full in a `hardware:` block, and results on GPUs no published row calibrates saying so."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from paratune.oracle.catalog import gpu, gpu_card, gpu_names
from paratune.oracle.errors import InputError
from paratune.oracle.evaluate import evaluate_simulate
from paratune.oracle.inputs import load_cluster, load_workload
from paratune.oracle.performance.calibration import calibrated

from .conftest import EXAMPLES
from .test_server_common import PARATUNE

NEW = ("h800", "h20", "b300", "gb300", "mi350x")


@pytest.mark.parametrize("typed,name", [("H100", "h100-sxm"), ("h100_sxm5", "h100-sxm"), ("MI350X", "mi350x"),
                                        ("H800", "h800"), ("gb300 nvl72", "gb300"), ("A100", "a100-80g")])
def test_names_people_type_resolve_to_the_catalog_part(typed, name):
    assert gpu(typed).name == name


def test_new_parts_are_in_the_catalog_with_their_figures_and_sources():
    assert set(NEW) <= set(gpu_names())
    for name in NEW:
        card = gpu_card(name)
        assert card["source"] and card["hbm_gb"] > 0 and card["bf16_tflops"] > 0 and card["fp8_tflops"] > 0
    # H800: the H100's compute and HBM with NVLink cut to 400 GB/s bidirectional (datasheet)
    assert (gpu("h800").bf16_tflops, gpu("h800").intra_node_gb_s) == (gpu("h100-sxm").bf16_tflops, 200)
    # MI350X: the MI355X die at 2.2 instead of 2.4 GHz (AMD: 2.3 vs 2.5 PF dense BF16)
    assert gpu("mi350x").bf16_tflops == pytest.approx(gpu("mi355x").bf16_tflops * 2.2 / 2.4, rel=1e-4)


def test_an_unknown_gpu_gets_the_closest_names_and_the_way_out():
    with pytest.raises(InputError) as err:
        gpu("h1000")
    assert "did you mean" in str(err.value) and "h100" in str(err.value) and "hardware:" in str(err.value)


def test_a_gpu_the_catalog_lacks_is_described_in_full_in_hardware(tmp_path):
    data = yaml.safe_load((EXAMPLES / "clusters" / "h100-8n.yaml").read_text())
    data["target_cluster"]["gpu_arch"] = "x100"
    data["hardware"] = {"vendor": "nvidia", "family": "hopper", "hbm_gb": 100, "hbm_tb_s": 4.0, "bf16_tflops": 1000,
                        "fp8_tflops": 2000, "num_sms": 140, "intra_node_gb_s": 450, "inter_node_gb_s": 50}
    path = tmp_path / "x100.yaml"
    path.write_text(yaml.safe_dump(data))
    cluster = load_cluster(path)
    assert (cluster.gpu.name, cluster.gpu.hbm_gb) == ("x100", 100) and not calibrated(cluster.gpu)
    del data["hardware"]["num_sms"]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as err:
        load_cluster(path)
    assert "hardware.num_sms" in str(err.value) and str(path) in str(err.value)


def test_results_on_a_gpu_no_published_row_calibrates_say_so(tmp_path):
    assert calibrated(gpu("h100-sxm")) and calibrated(gpu("b300")) and not calibrated(gpu("h20"))
    w = load_workload(EXAMPLES / "workloads" / "llama3-70b-h100.yaml")
    data = yaml.safe_load((EXAMPLES / "clusters" / "h100-8n.yaml").read_text())
    data["target_cluster"]["gpu_arch"] = "H20"
    data["optimization"]["hbm_capacity_gb"] = 96
    path = tmp_path / "h20.yaml"
    path.write_text(yaml.safe_dump(data))
    h20 = load_cluster(path)
    assert evaluate_simulate(w, h20).breakdown["time_gpu_calibrated"] == 0.0
    h100 = load_cluster(EXAMPLES / "clusters" / "h100-8n.yaml")
    assert evaluate_simulate(w, h100).breakdown["time_gpu_calibrated"] == 1.0
    out = subprocess.run([PARATUNE, "project", "performance",
                          "--workload", str(EXAMPLES / "workloads" / "llama3-70b-h100.yaml"),
                          "--target-cluster", str(path)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert "h20 is uncalibrated" in out


def test_the_catalog_command_lists_every_gpu_and_model():
    out = subprocess.run([PARATUNE, "catalog"], capture_output=True, text=True, timeout=120, check=True,
                         env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"}).stdout
    for name in (*NEW, "h100-sxm", "mixtral-8x22b", "deepseek-v3"):
        assert name in out
