"""DAMON kdamonds built, updated, started and stopped through ``/sys/kernel/mm/damon/admin``.

The profile's ``damon:`` section (:mod:`nodeagent.profile.damon`) names kdamonds by purpose; the plan resolves
node classes from memory tiers (:mod:`.nodes`), converts human units to the kernel's files (:mod:`.spec`),
checks every file, action and filter against the kernel's capabilities (found without writing, see
:mod:`nodeagent.facts.damon_caps`), and diffs with what the kernel shows and what nodeagent owns
(:mod:`.plan`). Apply writes in the kernel's order and verifies each ``on``/``commit`` (:mod:`.apply`).
Statistics of nodeagent's own kdamonds: :mod:`.stats`. The kind itself (:class:`.kind.DamonResource`) and
:func:`.kind.build_specs` are in :mod:`.kind`; one typed tree (:mod:`.model`) is what the plan builds, what the
facts read back and what apply writes. This package imports nothing, so that the facts may read into
:mod:`.model` without loading the kind.

A ``damon:`` section is the complete set of nodeagent's kdamonds: one of nodeagent's that it no longer names is
stopped and its slot released (a foreign kdamond never is); ``damon: {kdamonds: []}`` removes them all. A kdamond it
stops because it acts on a node that becomes a pinned pool (``memory.dax`` ``use: pinned-pool``; such nodes are
never ``slow``) is stopped before the DAX devices are rezoned. A profile without ``damon:`` leaves nodeagent's
kdamonds alone, and warns about each that acts on a pinned-pool node.
A kdamond whose classes resolve to no node here (no CXL node, say) is skipped with a warning.
"""
