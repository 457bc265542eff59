"""deploy/kubernetes: every manifest validated against the Kubernetes API schema (kubernetes-validate's offline
schemas, strict: unknown fields are errors) for the oldest and newest versions it is meant for, and the DaemonSet's
promises checked: host paths, hostNetwork, the ConfigMap mounted without subPath, the selector, the metrics port."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from nodeagent.cli.main import cli, main
from nodeagent.k8s.labels import FEATURES_DIR
from nodeagent.k8s.run import SYSTEMD_DIR
from nodeagent.metrics.exporter import DEFAULT_PORT
from nodeagent.state import STATE_DIR

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "kubernetes"
#: The Kubernetes versions the manifests are validated for (docs/kubernetes.md states the same).
VERSIONS = ("1.34.0", "1.37.0")
#: Custom resources (no schema in kubernetes-validate): NFD's NodeFeatureRule, the Prometheus Operator's
#: ServiceMonitor. Checked for the fields their controllers need.
CUSTOM = {("nfd.k8s-sigs.io/v1alpha1", "NodeFeatureRule"), ("monitoring.coreos.com/v1", "ServiceMonitor")}
OPTIONAL = {"servicemonitor.yaml"}  # not in kustomization.yaml: needs the Prometheus Operator's CRD


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def by_kind() -> dict[str, dict]:
    return {d["kind"]: d for f in sorted(DEPLOY.glob("*.yaml")) if f.name != "kustomization.yaml"
            for d in docs(f.name)}


def test_kustomization_lists_every_manifest_but_the_optional_ones() -> None:
    kust = docs("kustomization.yaml")[0]
    assert kust["kind"] == "Kustomization"
    files = {f.name for f in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == files - OPTIONAL


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(f.name for f in DEPLOY.glob("*.yaml") if f.name != "kustomization.yaml"))
def test_manifest_is_valid_for_the_kubernetes_api(name: str, version: str) -> None:
    for doc in docs(name):
        if (doc["apiVersion"], doc["kind"]) in CUSTOM:
            assert doc["metadata"]["name"] and doc["spec"]
            continue
        kubernetes_validate.validate(doc, version, strict=True)


def test_a_bad_manifest_is_refused_by_the_validator() -> None:  # the validator is not a no-op
    ds = by_kind()["DaemonSet"]
    ds["spec"]["template"]["spec"]["hostNetwrok"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, VERSIONS[0], strict=True)


def test_the_daemonset_mounts_what_run_needs() -> None:
    kinds = by_kind()
    pod = kinds["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["hostPID"] is True  # uevents; the host's /proc
    (c,) = pod["containers"]
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    host = {vols[m["name"]]["hostPath"]["path"]: m for m in mounts.values() if "hostPath" in vols[m["name"]]}
    for path in ("/sys", "/dev", "/run/udev", STATE_DIR, FEATURES_DIR, SYSTEMD_DIR):
        assert path in host and host[path]["mountPath"] == path, path
    for path in ("/sys", STATE_DIR, FEATURES_DIR):
        assert not host[path].get("readOnly"), f"{path} must be writable"
    assert host[SYSTEMD_DIR]["readOnly"] is True
    profile = mounts["/etc/nodeagent"]
    assert "configMap" in vols[profile["name"]] and "subPath" not in profile  # updates arrive by ..data swap
    assert vols[profile["name"]]["configMap"]["name"] == kinds["ConfigMap"]["metadata"]["name"]
    assert c["securityContext"]["privileged"] is True and c["securityContext"]["readOnlyRootFilesystem"] is True
    # The node selector is the label the NodeFeatureRule creates.
    rule_labels = {k for r in kinds["NodeFeatureRule"]["spec"]["rules"] for k in r["labels"]}
    assert set(pod["nodeSelector"]) <= rule_labels
    # The arguments parse as `nodeagent run` options, and the metrics port is the one they listen on.
    assert c["args"][0] == "run"
    run_ctx = cli.commands["run"].make_context("run", list(c["args"][1:]))
    assert run_ctx.params["do_apply"] is False  # `kubectl apply -k` of the base changes no node: plan-only
    assert run_ctx.params["metrics_listen"] == f":{DEFAULT_PORT}"
    (port,) = c["ports"]
    assert port["containerPort"] == DEFAULT_PORT and port["name"] == "metrics"


def test_service_and_servicemonitor_reach_the_metrics_port() -> None:
    kinds = by_kind()
    pod_labels = kinds["DaemonSet"]["spec"]["template"]["metadata"]["labels"]
    svc = kinds["Service"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert {p["targetPort"] for p in svc["spec"]["ports"]} == {"metrics"}
    sm = kinds["ServiceMonitor"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}


def test_the_configmaps_profile_validates(tmp_path: Path, capsys) -> None:
    for name, text in by_kind()["ConfigMap"]["data"].items():
        (tmp_path / name).write_text(text)
    assert main(["validate", str(tmp_path / "profile.yaml")]) == 0, capsys.readouterr().err


def _json_patch(doc: dict, ops: list[dict]) -> dict:
    """RFC 6902 ``add`` as kustomize applies it (the only op the overlay uses)."""
    import copy

    out = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] == "add", op
        *parents, last = op["path"].strip("/").split("/")
        node = out
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node.insert(len(node) if last == "-" else int(last), op["value"])
        else:
            node[last] = op["value"]
    return out


def test_the_apply_overlay_is_the_base_with_apply() -> None:
    """deploy/kubernetes/overlays/apply: the same DaemonSet, reconciling (``run --apply``), after plan-only."""
    overlay = yaml.safe_load((DEPLOY / "overlays" / "apply" / "kustomization.yaml").read_text())
    assert overlay["resources"] == ["../.."]
    (patch,) = overlay["patches"]
    ds = by_kind()["DaemonSet"]
    assert patch["target"] == {"kind": "DaemonSet", "name": ds["metadata"]["name"]}
    patched = _json_patch(ds, yaml.safe_load(patch["patch"]))
    (c,) = patched["spec"]["template"]["spec"]["containers"]
    run_ctx = cli.commands["run"].make_context("run", list(c["args"][1:]))
    assert c["args"][0] == "run" and run_ctx.params["do_apply"] is True
    assert run_ctx.params["metrics_listen"] == f":{DEFAULT_PORT}" and run_ctx.params["interval"]


def test_the_configmaps_profile_is_the_shipped_one(tmp_path: Path) -> None:
    """The ConfigMap extends the shipped cxl-inference profile: merged, it is that profile (its description
    aside), so the DaemonSet and a host install hold a node to the same settings."""
    from nodeagent.profile import load_profile

    (tmp_path / "profile.yaml").write_text(by_kind()["ConfigMap"]["data"]["profile.yaml"])
    mine = load_profile(tmp_path / "profile.yaml").data
    shipped = load_profile(REPO / "profiles" / "cxl-inference.yaml").data
    strip = lambda d: {k: (v if k != "metadata" else {"name": v["name"]}) for k, v in d.items() if k != "extends"}  # noqa: E731
    assert strip(mine) == strip(shipped)
