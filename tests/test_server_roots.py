"""Every file a tool makes the loaders read stays under the allowed roots: the workload's `extends:`
chain, a Hugging Face config, a Primus experiment's model file, each after symlinks. A target outside is
refused naming the path and the rule, and its content is never read into the answer."""

from __future__ import annotations

import yaml

from .conftest import EXAMPLES
from .test_server_common import MI300X_1N, in_process, portal_client

SECRET = "num_layers: 3  # secret-marker-xyz\n"


def _open(portal, client, workload, cluster):
    return portal.call(client.call_tool, "open_run", {"workload": str(workload), "cluster": str(cluster)})


def test_extends_model_files_and_symlinks_outside_the_roots_are_refused(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.yaml").write_text(SECRET)
    (outside / "hf").mkdir()
    hf_config = EXAMPLES.parent / "tests/fixtures/hf/llama-3-8b/config.json"
    (outside / "hf" / "config.json").write_text(hf_config.read_text())
    (root / "link.yaml").symlink_to(outside / "secret.yaml")
    cluster = root / "cluster.yaml"
    cluster.write_text(MI300X_1N.read_text())
    cases = {"relative": "../outside/secret.yaml", "absolute": str(outside / "secret.yaml"),
             "symlink": "link.yaml", "proc": "/proc/self/environ", "hf folder": str(outside / "hf")}
    with in_process(root, open_run=False) as (server, _), portal_client(server) as (portal, client):
        for name, parent in cases.items():
            workload = root / f"{name.replace(' ', '_')}.yaml"
            workload.write_text(yaml.safe_dump({"extends": parent, "global_batch_size": 8}))
            result = _open(portal, client, workload, cluster)
            text = result.content[0].text
            assert result.is_error and "outside the allowed roots" in text, (name, text)
            assert "secret-marker" not in text
        # a Primus experiment whose model file sits outside
        experiment = root / "primus.yaml"
        experiment.write_text(yaml.safe_dump({"modules": {"pre_trainer": {
            "framework": "megatron", "config": "pre_trainer.yaml", "model": str(outside / "secret.yaml"),
            "overrides": {}}}}))
        result = _open(portal, client, experiment, cluster)
        assert result.is_error and "outside the allowed roots" in result.content[0].text
        # inside the roots the same shape of workload opens
        (root / "card.yaml").write_text(yaml.safe_dump({"extends": "llama3-8b"}))
        (root / "inside.yaml").write_text(yaml.safe_dump({"extends": "card.yaml", "global_batch_size": 8}))
        assert not _open(portal, client, root / "inside.yaml", cluster).is_error


def test_the_command_line_inputs_are_the_operators_and_load_from_anywhere(tmp_path):
    """`serve --workload` names its files itself: they are not confined (the tools' open_run is)."""
    from paratune.ledger import Ledger
    from paratune.server.paths import AllowedRoots
    from paratune.server.session import Session

    root = tmp_path / "root"
    root.mkdir()
    with Ledger(tmp_path / "l.sqlite") as ledger:
        session = Session(ledger, AllowedRoots([root]))
        active = session.open_run(EXAMPLES / "workloads" / "llama3-8b-mi300x.yaml", MI300X_1N, confined=False)
        assert active.workload.model.num_layers == 32
