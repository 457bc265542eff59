#!/usr/bin/python
# Copyright: nodeagent contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: reconcile
short_description: Make a tiered-memory node match a nodeagent profile
version_added: "0.1.0"
description:
  - Runs nodeagent's engine on the target through its Python API, the same code path as C(nodeagent apply);
    gather facts, plan, carry out the plan, re-read the node to verify it, record what was done.
  - In check mode it only plans (C(nodeagent plan)); nothing is written, not even nodeagent's state records.
  - In diff mode every setting that is (or in check mode would be) written is returned as one
    O(ignore:before)/O(ignore:after) pair, after the plan's summary, so C(ansible-playbook --check --diff) shows a
    reviewer what would change on each host.
  - The node's warnings (from the plan and from checks that warned) and the checks that were skipped reach the
    play as warnings, each starting with the node's name, when the task changes something (in check mode, would),
    fails, or runs with C(-v); a run that changes nothing shows only those not yet shown for this profile on this
    kernel release (all of them on the first run, after a kernel upgrade or a profile edit; a check by its name
    and status, what it found may move with the node) and returns every one in
    RV(node_warnings), so the same warnings are not repeated on every converged run. Outside check mode the
    module records which it showed, in the state record C(nodeagent apply) keeps (C(advisories.json)); check mode
    only reads it. A failed check fails the task with what it found, its fix and the exit code.
  - The module runs under the target's Python and imports nodeagent there. Install nodeagent into a virtualenv on
    the target and set C(ansible_python_interpreter) to that virtualenv's python (Debian 12 refuses system-wide
    pip installs).
requirements:
  - nodeagent (this repository's Python package), importable by the target's C(ansible_python_interpreter)
  - ansible-core 2.16 to 2.19 on the controller (2.20 and later need Python 3.12 or newer there).
options:
  profile:
    description:
      - The node profile, either the absolute path of a profile file on the target, or the profile's YAML
        itself (a value with a line break, or one starting with C({), is read as YAML).
      - A file's relative C(extends) resolve against the file's directory, as with the CLI.
      - Inline YAML's relative C(extends) resolve against O(profile_dir); without O(profile_dir) they are refused.
    type: str
    required: true
  profile_dir:
    description:
      - Directory on the target against which an inline O(profile)'s C(extends) resolve. Extended files must be
        inside it.
      - Ignored when O(profile) is a path.
    type: path
  allow_disruptive:
    description:
      - Carry out disruptive changes (for example taking memory offline). Without it they are skipped as blocked
        and the task fails, as C(nodeagent apply) exits 5.
    type: bool
    default: false
  skip_checks:
    description:
      - Preflight checks to skip (their names, or V(all)), as C(nodeagent apply --skip-checks).
      - With a nodeagent that has no preflight checks this is ignored with a warning.
    type: list
    elements: str
    default: []
  root:
    description:
      - Root under which C(/sys), C(/proc), C(/etc) and C(/var/lib/nodeagent) are found on the target, as
        C(nodeagent --root). A simulated node (C(nodeagent sim create)) is a root too.
    type: path
    default: /
  lock_timeout:
    description:
      - Seconds to wait for another nodeagent run that holds the node's state lock.
    type: float
    default: 60.0
  metrics_textfile:
    description:
      - Also write nodeagent's Prometheus metrics to this path on the target (atomically) after the apply, for
        node_exporter's textfile collector, as C(nodeagent apply --metrics-textfile).
      - Whether or not it is given, the apply refreshes the node's NFD labels where NFD's C(features.d) directory
        exists, as C(nodeagent apply) does (the same post-apply hooks).
    type: path
attributes:
  check_mode:
    support: full
    description: Plans only; nothing is written. RV(changed) says whether a real run would write something.
  diff_mode:
    support: full
    description: Returns one before/after pair per setting written (or, in check mode, to be written).
  platform:
    support: full
    platforms: posix
    description: Linux nodes (the kernel's sysfs and procfs), or a simulated node on any POSIX host.
notes:
  - RV(changed) is true when something was written; in check mode, when something would be.
  - A plan with a problem the node cannot carry out (a knob the kernel lacks) fails the task and writes nothing,
    as C(nodeagent apply) exits 1. A change that failed or was blocked fails the task after the rest was applied,
    as C(nodeagent apply) exits 5; RV(outcomes) says what was done.
  - Applying to the machine's own root (O(root=/)) needs root privileges (C(become)).
author:
  - nodeagent contributors (@nodeagent)
"""

EXAMPLES = r"""
- name: Converge the node to the CXL inference profile
  nodeagent.tiering.reconcile:
    profile: /etc/nodeagent/profiles/cxl-inference.yaml
  become: true

- name: Inline profile whose extends resolve against a directory on the target
  nodeagent.tiering.reconcile:
    profile: |
      apiVersion: nodeagent/v1
      kind: NodeProfile
      extends: [base.yaml]
      metadata: {name: cxl-inference}
      kernel: {numa_balancing: memory-tiering, demotion_enabled: true}
    profile_dir: /etc/nodeagent/profiles
  become: true

- name: Rehearse on a simulated node, and keep the plan for later tasks
  nodeagent.tiering.reconcile:
    profile: /srv/profiles/cxl-inference.yaml
    root: /var/tmp/sim/h100-cxl
  register: tiering

- name: Nothing disruptive was planned
  ansible.builtin.assert:
    that: tiering.plan.changes | selectattr('disruptive') | list | length == 0
"""

RETURN = r"""
changed:
  description: Something was written (in check mode, would be).
  returned: always
  type: bool
msg:
  description: What happened, in one line; on failure the same message C(nodeagent apply) gives.
  returned: always
  type: str
  sample: "applied 4 changes and verified them"
status:
  description: The result as C(nodeagent apply) reports it.
  returned: when the profile was loaded and planned
  type: str
  choices: [converged, unchanged, partial, failed, dry-run]
profile:
  description: The profile's C(metadata.name).
  returned: when the profile was loaded and planned
  type: str
  sample: cxl-inference
profile_digest:
  description: sha256 of the merged profile, as recorded in the node's last-applied state.
  returned: when the profile was loaded and planned
  type: str
node:
  description: The node the plan is for.
  returned: when the profile was loaded and planned
  type: str
  sample: "gpu-17"
summary:
  description: One line per change written (in check mode, to be written), as C(nodeagent plan) prints it.
  returned: when the profile was loaded and planned
  type: list
  elements: str
  sample: ["kernel.numa_balancing: 0 (disabled) -> 2 (memory-tiering)"]
plan:
  description: The plan, as C(nodeagent plan --format json) prints it.
  returned: when the profile was loaded and planned
  type: dict
  contains:
    changes:
      description: Each change (kind, target, op, before, after, labels, reason, disruptive, path).
      type: list
      elements: dict
    problems:
      description: What this node cannot do (kind, target, message, hint, blocking).
      type: list
      elements: dict
    warnings:
      description: Advisory messages.
      type: list
      elements: str
    unchanged:
      description: Managed settings already as the profile wants.
      type: list
      elements: str
outcomes:
  description: What was done with each change (target, kind, op, status applied/failed/blocked, message).
  returned: when the profile was loaded and planned
  type: list
  elements: dict
verify_errors:
  description: Values the node did not keep after they were written.
  returned: when the profile was loaded and planned
  type: list
  elements: str
checks:
  description: The preflight check report, with a nodeagent that runs checks.
  returned: when available
  type: dict
drift:
  description: Drift from the last applied profile, with a nodeagent that reports it.
  returned: when available
  type: dict
skipped_checks:
  description: The checks skipped on request (O(skip_checks)), with a nodeagent that runs checks.
  returned: when available
  type: list
  elements: str
node_warnings:
  description: The node's warnings (the plan's, the checks that warned or were skipped), each starting with the
    node's name; also shown as the play's warnings when the task changed something, failed, or ran with C(-v), and
    otherwise those not yet shown for this profile on this kernel release.
  returned: when the profile was loaded and planned
  type: list
  elements: str
  sample: ["gpu-17: check capacity warned: ..."]
exit_code:
  description: The exit code C(nodeagent) would have given (1 plan cannot be carried out, 4 check failed,
    5 partial apply, 64 usage, 65 invalid profile, 75 another run held the state lock, 77 needs root).
  returned: on failure
  type: int
  sample: 5
diff:
  description: One before/after pair per setting written (or to be written), in diff mode.
  returned: in diff mode, when something changes
  type: list
  elements: dict
"""

# Imports follow the documentation, as Ansible modules are laid out (ansible-doc reads the strings above).
import inspect  # noqa: E402
import os  # noqa: E402
import traceback  # noqa: E402

from ansible.module_utils.basic import AnsibleModule, missing_required_lib  # noqa: E402

try:
    from nodeagent.engine.core import Engine
    from nodeagent.engine.hooks import AfterApply, after_apply
    from nodeagent.host import open_host
    from nodeagent.profile import load_profile, load_profile_text
    from nodeagent.util.errors import ExitCode, NodeagentError, ProfileError, UsageError
except ImportError:
    NODEAGENT_IMPORT_ERROR = traceback.format_exc()
else:
    NODEAGENT_IMPORT_ERROR = None

ARGUMENT_SPEC = dict(
    profile=dict(type="str", required=True),
    profile_dir=dict(type="path"),
    allow_disruptive=dict(type="bool", default=False),
    skip_checks=dict(type="list", elements="str", default=[]),
    root=dict(type="path", default="/"),
    lock_timeout=dict(type="float", default=60.0),
    metrics_textfile=dict(type="path"),
)


def is_inline(profile):
    """A value with a line break, or a flow mapping, is the profile's YAML; anything else names a file."""
    return "\n" in profile or profile.lstrip().startswith("{")


def load(params):
    text = params["profile"]
    if is_inline(text):
        base = params["profile_dir"]
        if base is not None and not os.path.isdir(base):
            raise UsageError(f"profile_dir {base}: not a directory on the target")
        return load_profile_text(text, "<inline profile>", base_dir=base)
    if not os.path.isabs(text):
        raise ProfileError([f"profile {text}: give the absolute path of a profile file on the target (or the "
                            "profile's YAML itself)"])
    return load_profile(text)


def apply_kwargs(engine, skip_checks):
    """``skip_checks`` for an Engine.apply that takes it (a nodeagent with preflight checks); else a warning."""
    if "skip_checks" in inspect.signature(engine.apply).parameters:
        try:
            from nodeagent.checks.registry import parse_skips
        except ImportError:
            return {"skip_checks": frozenset(skip_checks)}, []
        return {"skip_checks": parse_skips(skip_checks)}, []
    if skip_checks:
        return {}, ["skip_checks is ignored: this nodeagent has no preflight checks"]
    return {}, []


def _label(value, label):
    return label if label is not None else str(value)


def _flag(c):
    """As the CLI's plan marks it: a change that takes memory offline or rezones it."""
    return "  [disruptive]" if getattr(c, "disruptive", False) else ""


def change_line(c):
    return f"{c.target}: {_label(c.before, c.before_label)} -> {_label(c.after, c.after_label)}{_flag(c)}"


def diff_entry(c):
    where = c.path or c.target
    return {"before_header": where, "after_header": where + _flag(c),
            "before": f"{c.target}: {_label(c.before, c.before_label)}\n",
            "after": f"{c.target}: {_label(c.after, c.after_label)}{_flag(c)}\n"}


def plan_diff(plan, written, check_mode):
    """The plan's summary as one prepared diff entry, shown above the per-setting pairs."""
    head = f"nodeagent plan for profile {plan.profile} on {plan.node or 'the node'}"
    verb = "would change" if check_mode else "changes"
    lines = [f"{head}: {len(written)} {verb}, {len(plan.unchanged)} unchanged"]
    lines += [f"  ~ {change_line(c)}" for c in written]
    lines += [f"  ! {p.message}" for p in plan.problems]
    return {"prepared": "\n".join(lines) + "\n"}


def _optional(result, data, key):
    value = data.get(key, getattr(result, key, None))
    if value is not None and hasattr(value, "to_dict"):
        value = value.to_dict()
    return value


def _problems(plan):
    return "; ".join(p.message for p in plan.problems)


def _said(result):
    """What a check result says beyond "pass": its failing or warning findings (with their fixes), or its reason."""
    said = [f.message + (f" (fix: {f.remedy})" if f.remedy else "") for f in getattr(result, "findings", ())
            if f.status != "pass"]
    return "; ".join(said) or getattr(result, "reason", None) or getattr(result, "summary", "")


def warnings_of(result):
    """What an operator must read from this run, as ``(key, text)``: the plan's warnings, the checks that warned
    (with what they found) and the checks that were skipped (with why). ``key`` is what the record of the
    warnings shown keeps: the text of a plan's warning; a check's name and status (what a check found moves with
    the node: a capacity check's numbers before and after the expanders are onlined)."""
    out = [(w, w) for w in result.plan.warnings]
    report = getattr(result, "checks", None)
    for r in getattr(report, "results", ()):
        if r.status == "warn":
            out.append((f"check {r.name} warned", f"check {r.name} warned: {_said(r)}"))
        elif r.status == "skipped":
            out.append((f"check {r.name} skipped", f"check {r.name} skipped: {r.reason or r.summary}"))
    return out


def node_warnings(result):
    """:func:`warnings_of`, each starting with the node's name (a play's warnings come from many hosts)."""
    node = result.plan.node or "node"
    return [f"{node}: {w}" for _, w in warnings_of(result)]


def to_say(engine, result, loud):
    """Which of :func:`warnings_of` the play shows as warnings: every one when ``loud`` (the task changed something,
    failed, or runs with -v), else those not yet shown for this profile on this kernel (all of them on the first
    run), as the CLI says each advisory once (nodeagent.state.advisories). A nodeagent without that record: all."""
    found = warnings_of(result)
    shown = getattr(engine, "advisories_shown", None)
    if loud or shown is None:
        return found
    seen = shown(result.plan.profile, result.plan.profile_digest, [k for k, _ in found])
    return [(k, w) for k, w in found if k not in seen]


def failure(result, check_mode, allow_disruptive, checks):
    """``(message, exit code)`` when the run failed (or in check mode, would fail) as the CLI would, else None."""
    plan = result.plan
    if isinstance(checks, dict) and checks.get("ok") is False:
        report = getattr(result, "checks", None)
        failed = [f"{r.name}: {_said(r)}" for r in getattr(report, "failed", ())]
        names = "; ".join(failed) or ", ".join(checks.get("failed") or []) or "see checks"
        code = int(ExitCode.CHECK_FAILED)
        return (f"preflight checks failed (exit {code}): {names}; nothing was applied (to go ahead anyway: "
                "skip_checks)", code)
    if plan.blocked and not result.outcomes:
        verb = "would be" if check_mode else "was"
        return (f"nothing {verb} applied: the plan has problems this node cannot carry out: {_problems(plan)}",
                int(ExitCode.ERROR))
    if check_mode:  # what the engine says its executor would hold back (Result.expected), not re-derived here
        reasons = [f"{o.change.target} would be {o.status}: {o.message}" for o in result.expected
                   if o.status != "applied"]
        reasons += [p.message for p in plan.problems]
        if reasons:
            hint = (" (set allow_disruptive: true to carry out disruptive changes)"
                    if any(o.status == "blocked" for o in result.expected) and not allow_disruptive else "")
            return "apply would be partial: " + "; ".join(reasons) + hint, int(ExitCode.PARTIAL)
        return None
    if result.ok:
        return None
    reasons = [f"{o.change.target}: {o.status} ({o.message})" for o in result.outcomes if o.status != "applied"]
    reasons += [p.message for p in plan.problems]
    reasons += [f"verify: {e}" for e in result.verify_errors]
    reasons += [f"not recorded: {e}" for e in getattr(result, "record_errors", ())]  # changed stays true
    msg = "apply partially done: " + "; ".join(reasons)
    if any(o.status == "blocked" for o in result.outcomes):
        msg += " (set allow_disruptive: true to carry out disruptive changes)"
    return msg, int(ExitCode.PARTIAL)


def report(result, check_mode, allow_disruptive, want_diff):
    """The module's return values from an engine Result, and the failure (message, code) if any."""
    plan = result.plan
    data = result.to_dict()
    if check_mode:
        written = [o.change for o in result.expected if o.status == "applied"]
    else:
        written = [o.change for o in result.outcomes if o.status == "applied"]
    status = data["status"]
    if not check_mode and not written and result.ok:
        status = "unchanged"  # the engine calls an empty run "converged"; for a task it is "unchanged"
    ret = {
        "changed": bool(written),
        "status": status,
        "profile": plan.profile,
        "profile_digest": plan.profile_digest,
        "node": plan.node,
        "summary": [change_line(c) for c in written],
        "plan": data["plan"],
        "outcomes": data["outcomes"],
        "verify_errors": data["verify_errors"],
    }
    for key in ("checks", "drift", "skipped_checks"):
        value = _optional(result, data, key)
        if value is not None:
            ret[key] = value
    unchanged = len(plan.unchanged)
    if want_diff and written:
        ret["diff"] = [plan_diff(plan, written, check_mode)] + [diff_entry(c) for c in written]
    if check_mode:
        ret["msg"] = (f"check mode: {len(written)} change(s) would be made, {unchanged} unchanged" if written
                      else "check mode: the node matches the profile")
    elif written:
        ret["msg"] = f"applied {len(written)} change(s) and verified them, {unchanged} unchanged"
    else:
        ret["msg"] = "the node matches the profile"
    return ret, failure(result, check_mode, allow_disruptive, ret.get("checks"))


def run(module):
    p = module.params
    loaded = load(p)
    if not os.path.isdir(p["root"]):
        raise UsageError(f"root {p['root']}: not a directory on the target",
                         hint="give the directory under which /sys and /proc are (/ for the node itself)")
    engine = Engine(open_host(p["root"]), lock_timeout=p["lock_timeout"])
    kwargs, warnings = apply_kwargs(engine, p["skip_checks"])
    for w in warnings:
        module.warn(w)
    result = engine.apply(loaded, dry_run=module.check_mode, allow_disruptive=p["allow_disruptive"], **kwargs)
    # the hooks every apply goes through (CLI, DaemonSet, this module): NFD labels, the metrics textfile
    done = after_apply(engine, loaded, result, AfterApply(metrics_textfile=p["metrics_textfile"]))
    for note in done.notes:
        module.warn(note)
    if done.failed is not None:  # the apply stands (reported as the task's result); the hook's failure fails it
        raise done.failed
    ret, failed = report(result, module.check_mode, p["allow_disruptive"], module._diff)
    ret["node_warnings"] = node_warnings(result)
    # Said when they matter (something changes or fails), when asked (-v), or the first time for this profile and
    # kernel; a converged run after that keeps them in the result and counts them in its message
    node = result.plan.node or "node"
    said = to_say(engine, result, failed is not None or ret.get("changed") or module._verbosity >= 1)
    for _, w in said:
        module.warn(f"{node}: {w}")
    quiet = len(ret["node_warnings"]) - len(said)
    if quiet:
        ret["msg"] += (f" ({quiet} warning{'s' if quiet != 1 else ''} already shown for this profile and kernel: "
                       "in node_warnings)")
    remember = getattr(engine, "remember_advisories", None)
    if said and remember is not None and getattr(result, "went_ahead", False):  # never in check mode
        remember(result.plan.profile, result.plan.profile_digest, [k for k, _ in warnings_of(result)])
    if failed is not None:
        ret["msg"], ret["exit_code"] = failed
        module.fail_json(**ret)
    module.exit_json(**ret)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if NODEAGENT_IMPORT_ERROR is not None:
        module.fail_json(msg=missing_required_lib(
            "nodeagent", reason="the module imports nodeagent on the target: install it into a virtualenv there "
            "and set ansible_python_interpreter to that virtualenv's python"),
            exception=NODEAGENT_IMPORT_ERROR)
    try:
        run(module)
    except NodeagentError as exc:
        report_ = getattr(exc, "report", None)
        extra = {"checks": report_.to_dict()} if hasattr(report_, "to_dict") else {}
        msg = exc.render()
        if exc.exit_code == ExitCode.NEEDS_ROOT:
            msg += " (in Ansible: become: true)"
        module.fail_json(msg=msg, exit_code=int(exc.exit_code), changed=False, **extra)


if __name__ == "__main__":
    main()
